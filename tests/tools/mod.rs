//! The outside tools the interop tests run, found where `scripts/tools`
//! installs them; a missing one fails the test with what to run, never
//! skips it.

// Each test uses some of the tools, none uses all.
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
        let python = std::env::var(self.env)
            .unwrap_or_else(|_| format!("{}/{}/bin/python", tools_dir(), self.dir));
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

/// An npm package `scripts/tools <tool>` installs in the tools dir.
pub struct NpmPackage {
    /// The variable `scripts/test` exports with the package's directory.
    pub env: &'static str,
    /// The package's directory under the tools dir.
    pub dir: &'static str,
    /// What node must load, relative to that directory (`.` when it is the
    /// package itself).
    pub module: &'static str,
    /// `scripts/tools` subcommand that installs it.
    pub tool: &'static str,
    /// What the test needs, for the failure message ("npm ... on node").
    pub needs: &'static str,
}

impl NpmPackage {
    /// The package's directory: the variable's value, else where
    /// `scripts/tools` puts it.
    ///
    /// # Panics
    ///
    /// When node cannot load the package from there, with a sentence
    /// saying what to run.
    pub fn dir(&self) -> String {
        let dir =
            std::env::var(self.env).unwrap_or_else(|_| format!("{}/{}", tools_dir(), self.dir));
        let loads = Command::new("node")
            .args([
                "-e",
                "require(process.argv[1])",
                &format!("{dir}/{}", self.module),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            loads,
            "this test needs {}, and node cannot load it from {dir}: run `scripts/tools {}` (scripts/test does) and set {} to the path it prints",
            self.needs, self.tool, self.env
        );
        dir
    }
}

/// The directory `scripts/tools asyncapi-parser` installs `@asyncapi/parser`
/// in (its `node_modules` holds the parser): `ASYNCAPI_PARSER_DIR`, else
/// where that command puts it.
///
/// # Panics
///
/// When node cannot load the parser from there, with a sentence saying
/// what to run.
pub fn asyncapi_parser_dir() -> String {
    NpmPackage {
        env: "ASYNCAPI_PARSER_DIR",
        dir: "asyncapi-parser",
        module: "node_modules/@asyncapi/parser",
        tool: "asyncapi-parser",
        needs: "@asyncapi/parser 3.6.3 on node",
    }
    .dir()
}

/// Where `scripts/tools` keeps what it installs: `CONSUMER_TOOLS_DIR`, else
/// `~/.cache/consumer-rs/tools`.
fn tools_dir() -> String {
    std::env::var("CONSUMER_TOOLS_DIR").unwrap_or_else(|_| {
        format!(
            "{}/.cache/consumer-rs/tools",
            std::env::var("HOME").unwrap_or_default()
        )
    })
}
