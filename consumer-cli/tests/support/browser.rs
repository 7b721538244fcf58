//! A real headless Chromium, driven through chromedriver (`CHROMEDRIVER`,
//! `CHROMIUM`: `scripts/tools chromium` installs Debian's and prints their
//! paths), and the console served by the real binary.

use std::path::PathBuf;
use std::process::Stdio;

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The browser session and the driver process behind it.
pub struct Browser {
    pub client: Client,
    _driver: Child,
    _profile: PathBuf,
}

/// `$var`, else `name`'s path on the PATH (chromedriver wants a path for
/// the browser), else `name`.
fn tool(var: &str, name: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        std::env::var_os("PATH")
            .and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
            .map_or_else(|| name.to_owned(), |p| p.display().to_string())
    })
}

/// A free port on the loopback interface (chromedriver takes no port 0).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// Reads `child`'s standard output until a line containing `needle`, and
/// returns that line; panics with `missing` when the output ends first.
pub async fn wait_for_line(child: &mut Child, needle: &str, missing: &str) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.contains(needle) {
            // Keep draining, so the child never blocks on a full pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return line;
        }
    }
    panic!("{missing}");
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a fresh profile.
    pub async fn start() -> Self {
        let driver_path = tool("CHROMEDRIVER", "chromedriver");
        let chromium = tool("CHROMIUM", "chromium");
        let port = free_port();
        let mut driver = Command::new(&driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "chromedriver ({driver_path}) does not start: {e}; run `scripts/tools chromium` (Debian's chromium and chromium-driver) or set CHROMEDRIVER and CHROMIUM"
                )
            });
        wait_for_line(
            &mut driver,
            "started successfully",
            "chromedriver exited before it said it started: is Debian's chromium-driver installed (`scripts/tools chromium`)?",
        )
        .await;
        let profile = std::env::temp_dir().join(format!(
            "consumer-console-chromium-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let capabilities = serde_json::json!({
            "browserName": "chrome",
            "goog:loggingPrefs": { "browser": "ALL" },
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!("an object literal")
        };
        let client = ClientBuilder::new(
            hyper_util::client::legacy::connect::HttpConnector::new(),
        )
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|e| {
            panic!("Chromium ({chromium}) did not start under chromedriver: {e}; run `scripts/tools chromium` or set CHROMIUM")
        });
        Self {
            client,
            _driver: driver,
            _profile: profile,
        }
    }

    /// The browser's console messages of level SEVERE since the last call:
    /// uncaught exceptions, refused scripts (the page's policy), failed
    /// loads.
    pub async fn errors(&self) -> Vec<String> {
        let log = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("chromedriver returns the browser's log");
        log.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Saves a screenshot of the page as `<target dir>/console-screenshots/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = screenshots_dir();
        std::fs::create_dir_all(&dir).expect("the screenshots directory");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("the screenshot written");
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
        let _ = std::fs::remove_dir_all(&self._profile);
    }
}

/// Where screenshots go: beside the test binaries, in the target dir.
pub fn screenshots_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/debug/deps/console_browser-xxxx → target/console-screenshots
    exe.ancestors()
        .nth(3)
        .map(|target| target.join("console-screenshots"))
        .unwrap_or_else(|| std::env::temp_dir().join("console-screenshots"))
}

/// chromedriver's log endpoint (outside W3C WebDriver, which has none).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.to_owned()))
    }
}
