//! The outside tools the interop tests run, found where `scripts/tools`
//! installs them; a missing one fails the test with what to run, never
//! skips it.

// Each test uses some of these tools.
#![allow(dead_code)]

use std::process::{Command, Stdio};

/// A python venv `scripts/tools <tool>` makes in the tools dir.
pub struct Venv {
    /// The variable `scripts/test` exports with its python's path.
    pub env: &'static str,
    /// Its directory under the tools dir.
    pub dir: &'static str,
    /// `scripts/tools` subcommand that makes it.
    pub tool: &'static str,
    /// A python statement that succeeds only with what the test needs.
    pub imports: &'static str,
    /// What the test needs, for the failure message ("a python with ...").
    pub needs: &'static str,
}

impl Venv {
    /// The venv's python: the variable's value, else where `scripts/tools`
    /// puts it.
    ///
    /// # Panics
    ///
    /// When that python cannot import what the test needs, with a
    /// sentence saying what to run.
    pub fn python(&self) -> String {
        let python = std::env::var(self.env).unwrap_or_else(|_| {
            let tools = std::env::var("CONSUMER_TOOLS_DIR").unwrap_or_else(|_| {
                format!(
                    "{}/.cache/consumer-rs/tools",
                    std::env::var("HOME").unwrap_or_default()
                )
            });
            format!("{tools}/{}/bin/python", self.dir)
        });
        let imports = Command::new(&python)
            .args(["-c", self.imports])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            imports,
            "this test needs a python with {}, and {python} is not one: run `scripts/tools {}` (scripts/test does) and set {} to the path it prints",
            self.needs, self.tool, self.env
        );
        python
    }
}

/// The directory `scripts/tools asyncapi-parser` installs `@asyncapi/parser`
/// in (its `node_modules` holds the parser): `ASYNCAPI_PARSER_DIR`, else
/// where that command puts it.
///
/// # Panics
///
/// When the parser is not there or `node` does not run, with a sentence
/// saying what to run.
pub fn asyncapi_parser_dir() -> String {
    let dir = std::env::var("ASYNCAPI_PARSER_DIR").unwrap_or_else(|_| {
        let tools = std::env::var("CONSUMER_TOOLS_DIR").unwrap_or_else(|_| {
            format!(
                "{}/.cache/consumer-rs/tools",
                std::env::var("HOME").unwrap_or_default()
            )
        });
        format!("{tools}/asyncapi-parser")
    });
    let installed = std::path::Path::new(&dir)
        .join("node_modules/@asyncapi/parser/package.json")
        .is_file();
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        installed && node,
        "this test needs node and @asyncapi/parser 3.6.3 in {dir}/node_modules (node runs: {node}): run `scripts/tools asyncapi-parser` (scripts/test does) and set ASYNCAPI_PARSER_DIR to the path it prints"
    );
    dir
}
