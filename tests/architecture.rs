//! The house's rules, read from the dependency graph and the source: the
//! backends depend on `consumer-backend` and never on the runtime, the
//! codec crate on neither, the console on no reader (its `Operator` is the
//! CLI's), core's modules depend on each other without a
//! loop, the root stays the application's (at most 35 names), and the
//! sizes hold: no library function over 80 lines, no file of core over
//! 600, core's library under 16 k code lines (`architecture/sizes.rs`).

#[path = "architecture/sizes.rs"]
mod sizes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The backend crates.
const BACKENDS: &[&str] = &[
    "consumer-kafka",
    "consumer-amqp",
    "consumer-sqs",
    "consumer-kinesis",
];

/// The most names the application's root may hold (items re-exported by
/// core's root and the facade's own, not modules).
const MAX_ROOT_NAMES: usize = 35;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The file's code lines: comments (docs included) are left out, so a doc
/// example may show the application's paths.
fn code_lines(path: &Path) -> Vec<(usize, String)> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l.to_owned()))
        .collect()
}

/// The workspace's packages and the packages each depends on to build its
/// library (normal and build dependencies; dev-dependencies, which only
/// tests and doc examples use, left out), from `cargo metadata`.
fn library_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let mut graph = BTreeMap::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("a name").to_owned();
        let deps = package["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null() || d["kind"] == "build")
            .filter_map(|d| d["name"].as_str().map(str::to_owned))
            .collect();
        graph.insert(name, deps);
    }
    graph
}

#[test]
fn the_backend_crates_depend_on_the_backend_crate_and_never_on_the_runtime() {
    let graph = library_dependencies();
    // consumer-aws is below the AWS backends, so it keeps their boundary.
    for krate in BACKENDS.iter().chain(&["consumer-aws", "consumer-backend"]) {
        let deps = graph
            .get(*krate)
            .unwrap_or_else(|| panic!("{krate} is not in the workspace: {:?}", graph.keys()));
        assert!(
            !deps.contains("consumer-core"),
            "{krate} depends on consumer-core: a backend is written against consumer-backend alone"
        );
        if *krate != "consumer-backend" {
            assert!(
                deps.contains("consumer-backend"),
                "{krate} does not depend on consumer-backend"
            );
        }
    }
    assert!(
        graph["consumer-core"].contains("consumer-backend"),
        "the runtime builds on the backend crate"
    );
}

#[test]
fn the_codec_crate_depends_on_neither_the_runtime_nor_the_backend_crate() {
    let graph = library_dependencies();
    let deps = graph
        .get("consumer-codec")
        .unwrap_or_else(|| panic!("consumer-codec is not in the workspace: {:?}", graph.keys()));
    for inner in ["consumer-core", "consumer-backend"] {
        assert!(
            !deps.contains(inner),
            "consumer-codec depends on {inner}: codecs are a part of their own, which the runtime will call"
        );
    }
}

#[test]
fn the_console_reads_nothing_itself() {
    let graph = library_dependencies();
    let deps = graph.get("consumer-console").unwrap_or_else(|| {
        panic!(
            "consumer-console is not in the workspace: {:?}",
            graph.keys()
        )
    });
    // Its pages ask an `Operator`; the CLI answers with its own engine, so
    // a replay from the console is the command line's replay.
    for reader in BACKENDS.iter().chain(&["consumer-cli", "consumer-backend"]) {
        assert!(
            !deps.contains(*reader),
            "consumer-console depends on {reader}: it renders what its Operator reads, and reads nothing itself"
        );
    }
    assert!(
        graph["consumer-cli"].contains("consumer-console"),
        "`consumer console` serves it"
    );
}

/// Core's top-level modules and the ones each uses (`crate::<module>`),
/// tests left out.
fn core_module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = workspace().join("consumer-core").join("src");
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .expect("core's src")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let module = name.strip_suffix(".rs").unwrap_or(&name).to_owned();
            (module != "lib" && module != "main").then_some(module)
        })
        .collect();
    let mut graph = BTreeMap::new();
    for module in &modules {
        let dir = src.join(module);
        let files = if dir.is_dir() {
            rust_files(&dir)
        } else {
            vec![src.join(format!("{module}.rs"))]
        };
        let mut uses = BTreeSet::new();
        for file in files {
            let mut in_tests = false;
            for (_, line) in code_lines(&file) {
                if line.trim() == "mod tests {" {
                    in_tests = true;
                }
                if in_tests {
                    continue;
                }
                let mut rest = line.as_str();
                while let Some(at) = rest.find("crate::") {
                    rest = &rest[at + "crate::".len()..];
                    let heads: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
                        let end = group.find('}').unwrap_or(group.len());
                        group[..end]
                            .split(',')
                            .map(|i| i.trim().split("::").next().unwrap_or("").to_owned())
                            .collect()
                    } else {
                        vec![
                            rest.chars()
                                .take_while(|c| c.is_alphanumeric() || *c == '_')
                                .collect(),
                        ]
                    };
                    for head in heads {
                        if head != *module && modules.contains(&head) {
                            uses.insert(head);
                        }
                    }
                }
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// A loop in `graph`, as the modules along it, if there is one.
fn find_loop(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn cores_modules_depend_on_each_other_without_a_loop() {
    let graph = core_module_graph();
    assert!(graph.len() > 10, "core's modules were not found: {graph:?}");
    assert!(
        graph["runtime"].contains("router"),
        "the reader sees real edges: {graph:?}"
    );
    if let Some(cycle) = find_loop(&graph) {
        panic!("core's modules form a loop: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_loop_finder_finds_a_loop() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        find_loop(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

/// The names a `pub use` line of a root re-exports (`as` renames count
/// once; modules re-exported as crates are not names).
fn reexported_names(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("lib.rs");
    let mut names = Vec::new();
    let mut statement = String::new();
    for line in text.lines() {
        // Top-level items only: `__private`'s re-exports are indented.
        if statement.is_empty() && !line.starts_with("pub use ") {
            continue;
        }
        let line = line.trim();
        statement.push_str(line);
        statement.push(' ');
        if !line.ends_with(';') {
            continue;
        }
        let body = statement
            .trim()
            .trim_start_matches("pub use ")
            .trim_end_matches(';');
        let items: Vec<&str> = match (body.find('{'), body.rfind('}')) {
            (Some(open), Some(close)) => body[open + 1..close].split(',').collect(),
            _ => vec![body],
        };
        for item in items {
            let item = item.trim();
            if item.is_empty() || item.ends_with("::*") {
                continue;
            }
            let name = item
                .rsplit(" as ")
                .next()
                .unwrap_or(item)
                .rsplit("::")
                .next()
                .unwrap_or(item);
            // `consumer_kafka as kafka`: a module door, not a name; so are
            // the backend crate's modules core re-exports (`envelope`, ...).
            if item.starts_with("consumer_") && !item.contains("::") {
                continue;
            }
            if body.starts_with("consumer_backend::")
                && name.chars().next().is_some_and(char::is_lowercase)
            {
                continue;
            }
            names.push(name.to_owned());
        }
        statement.clear();
    }
    names
}

#[test]
fn the_root_holds_the_applications_names_only() {
    let core = reexported_names(&workspace().join("consumer-core/src/lib.rs"));
    let facade = reexported_names(&workspace().join("src/lib.rs"));
    let all: BTreeSet<&String> = core.iter().chain(&facade).collect();
    assert!(all.len() >= 20, "the roots were not read: {all:?}");
    for backend_only in [
        "Source",
        "Acker",
        "RetryCopy",
        "Origin",
        "Placement",
        "Invocation",
        "Outcome",
    ] {
        assert!(
            !all.iter().any(|n| n.as_str() == backend_only),
            "`{backend_only}` belongs behind the backend door or the macro's path, not at the root"
        );
    }
    assert!(
        all.len() <= MAX_ROOT_NAMES,
        "the root holds {} names (at most {MAX_ROOT_NAMES}): {all:?}",
        all.len()
    );
}

/// The guide's pages (`docs/guide/*.md`, `index.md` aside) by file stem.
fn guide_pages() -> Vec<String> {
    let dir = workspace().join("docs/guide");
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            (path.extension().is_some_and(|x| x == "md"))
                .then(|| path.file_stem()?.to_str().map(str::to_owned))
                .flatten()
        })
        .filter(|p| p != "index")
        .collect();
    pages.sort();
    pages
}

/// Every page of the guide is built into the crate docs (a module of
/// `src/guide.rs` that includes it, so its examples run as doctests) and
/// listed where readers look for it: the guide's index and the README.
#[test]
fn every_guide_page_is_built_and_listed() {
    let pages = guide_pages();
    assert!(
        pages.len() >= 10,
        "the guide's pages were not found: {pages:?}"
    );
    let read = |path: &str| {
        std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let module = read("src/guide.rs");
    let index = read("docs/guide/index.md");
    let readme = read("README.md");
    let mut missing = Vec::new();
    for page in &pages {
        if !module.contains(&format!("include_str!(\"../docs/guide/{page}.md\")"))
            || !module.contains(&format!("pub mod {page} {{}}"))
        {
            missing.push(format!(
                "{page}: not included by a `pub mod {page}` in src/guide.rs"
            ));
        }
        if !index.contains(&format!("]({page})")) {
            missing.push(format!("{page}: not in the table of docs/guide/index.md"));
        }
        if !readme.contains(&format!("/guide/{page}/)")) {
            missing.push(format!("{page}: not in the README's list of pages"));
        }
    }
    assert!(
        missing.is_empty(),
        "guide pages left out:\n{}",
        missing.join("\n")
    );
}

#[test]
fn no_library_function_is_over_80_lines() {
    let mut over = Vec::new();
    for dir in sizes::library_dirs(&workspace()) {
        for file in rust_files(&dir) {
            let Some(text) = sizes::library_text(&file) else {
                continue;
            };
            for (name, line, len) in sizes::functions(&sizes::code_only(&text)) {
                if len > sizes::MAX_FUNCTION_LINES {
                    let path = file.strip_prefix(workspace()).unwrap_or(&file);
                    over.push(format!("{}:{line} `{name}`: {len} lines", path.display()));
                }
            }
        }
    }
    assert!(
        over.is_empty(),
        "library functions over {} lines (split them into named steps):\n{}",
        sizes::MAX_FUNCTION_LINES,
        over.join("\n")
    );
}

#[test]
fn core_stays_within_its_size() {
    let mut code = 0;
    let mut long = Vec::new();
    for file in rust_files(&workspace().join("consumer-core/src")) {
        let Some(text) = sizes::library_text(&file) else {
            continue;
        };
        let lines = text.lines().count();
        if lines > sizes::MAX_CORE_FILE_LINES {
            long.push(format!("{}: {lines} lines", file.display()));
        }
        code += sizes::code_only(&text)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count();
    }
    assert!(
        long.is_empty(),
        "files of core over {} lines (one concern per file):\n{}",
        sizes::MAX_CORE_FILE_LINES,
        long.join("\n")
    );
    assert!(
        code <= sizes::MAX_CORE_CODE_LINES,
        "core's library holds {code} code lines, over {}: move a feature into a crate of its own",
        sizes::MAX_CORE_CODE_LINES
    );
    println!("core's library: {code} code lines");
}
