//! Progress bars on standard error for long operations; hidden when
//! standard error is not a terminal (scripts, tests) or `--json` is on.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` steps, described by `what`.
pub fn bar(len: u64, what: &str, hidden: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(len),
        if hidden {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        },
    );
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({per_sec}, {eta} left)")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}
