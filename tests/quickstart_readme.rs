//! The README's copy of what `cargo run --example quickstart` prints (in
//! "The two commands") is what the quickstart prints, all but the timing
//! (no services: the in-memory broker and in-memory SQLite).

// The quickstart carries the shop module, as `tests/asyncapi.rs` does.
#![allow(clippy::duplicate_mod)]

#[path = "../examples/quickstart.rs"]
#[allow(dead_code, unreachable_pub)]
mod quickstart;

/// The README's fenced `text` block that starts with the quickstart's
/// title line.
fn readme_block() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```text" {
            continue;
        }
        let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        if block.first().is_some_and(|l| l.starts_with("quickstart: ")) {
            return block.join("\n");
        }
    }
    panic!(
        "README.md has no ```text block starting with the quickstart's title (`quickstart: ...`)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_shows_what_the_quickstart_prints() {
    let report = quickstart::run().await.expect("the quickstart runs");
    // The example's binary is the crate `quickstart`; here the same file is
    // the module `quickstart` of this test crate, so type names that the
    // report quotes (a poison pill's decode error) carry this crate's name
    // in front.
    let report = report.replace(concat!(module_path!(), "::quickstart::"), "quickstart::");

    let readme = readme_block();
    let (shown, timing) = readme
        .rsplit_once('\n')
        .expect("the README's block has more than one line");
    assert!(
        timing.starts_with("finished in "),
        "the README's block ends with the timing line, not {timing:?}"
    );
    // `main` prints the report, a blank line, then the timing.
    let printed = report
        .strip_suffix('\n')
        .expect("the report ends with a newline");
    let shown = shown
        .strip_suffix('\n')
        .expect("a blank line before the timing");
    pretty_lines_eq(shown, printed);
}

/// Fails with the first line that differs, both sides shown in full.
fn pretty_lines_eq(readme: &str, printed: &str) {
    let differs = readme
        .lines()
        .zip(printed.lines())
        .position(|(a, b)| a != b)
        .or_else(|| {
            (readme.lines().count() != printed.lines().count())
                .then(|| readme.lines().count().min(printed.lines().count()))
        });
    if let Some(line) = differs {
        panic!(
            "the README's quickstart output differs from what it prints at line {}:\n\
             README:\n{readme}\n\nprinted:\n{printed}\n\n\
             update the README block in \"The two commands\" (or fix the quickstart)",
            line + 1
        );
    }
}
