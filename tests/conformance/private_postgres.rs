//! A PostgreSQL server of a test's own, to crash and start again: the
//! store's database going away under a running consumer, without touching
//! the server at `DATABASE_URL` that the other test binaries share.
//!
//! It runs Debian's server binaries (`/usr/lib/postgresql/*/bin`, the
//! newest version; `scripts/services postgres` installs them): `initdb`
//! into a fresh directory under the temp dir, then `pg_ctl` on a free port
//! of 127.0.0.1, with trust for user `postgres`. `initdb` and `postgres`
//! refuse to run as root, so as root they run as the OS user `postgres`
//! (the one Debian's package makes, which the shared server runs as too)
//! through `runuser`. Dropped, the server is stopped and its directory
//! removed.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The server binaries' directory: the newest `/usr/lib/postgresql/N/bin`
/// that has `initdb` and `pg_ctl`.
fn server_binaries() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL's server binaries (initdb and pg_ctl) are not under \
             /usr/lib/postgresql/*/bin: install Debian's postgresql package \
             (scripts/services postgres does)"
        ),
    }
}

/// Whether this process runs as root (`id -u` says 0).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// A port of 127.0.0.1 nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port on 127.0.0.1 for a private PostgreSQL: {e}"))
}

/// A running PostgreSQL server of the test's own.
pub struct PrivatePostgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// Run the server's binaries as this OS user (when the test is root).
    as_user: Option<&'static str>,
    /// Leave the data directory when dropped (evidence of a failure).
    keep: bool,
}

impl PrivatePostgres {
    /// A new cluster, started and answering.
    pub async fn start() -> Self {
        let bin = server_binaries();
        let data =
            std::env::temp_dir().join(format!("consumer-pg-{}", uuid::Uuid::new_v4().simple()));
        let as_user = is_root().then_some("postgres");
        let server = Self {
            bin,
            data,
            port: free_port(),
            as_user,
            keep: false,
        };
        let data = server.data.to_string_lossy().into_owned();
        server
            .run(
                "initdb",
                &[
                    "-D",
                    &data,
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "--no-sync",
                    "--no-locale",
                    "-E",
                    "UTF8",
                ],
            )
            .await;
        // The settings go in postgresql.conf (every start reads them).
        // fsync off: a crash here is the server's process dying, not the
        // machine's, so what was written survives in the page cache.
        let settings = format!(
            "\n# a test's private server (tests/conformance/private_postgres.rs)\n\
             port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{data}'\n\
             fsync = off\nmax_connections = 100\n",
            server.port
        );
        let conf = server.data.join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut f| std::io::Write::write_all(&mut f, settings.as_bytes()))
            .unwrap_or_else(|e| panic!("writing {}: {e}", conf.display()));
        server.restart().await;
        server
    }

    /// The server's URL: user `postgres`, database `postgres`.
    pub fn url(&self) -> String {
        Self::url_at(&self.addr())
    }

    /// The URL of the same server reached at `addr` (a link proxy's).
    pub fn url_at(addr: &str) -> String {
        format!("postgres://postgres@{addr}/postgres")
    }

    /// Its address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Keeps the data directory when dropped (the server is still
    /// stopped), and returns it: where a failed run's evidence stays.
    pub fn keep(&mut self) -> &Path {
        self.keep = true;
        &self.data
    }

    /// Crashes the server (`pg_ctl stop -m immediate`: its processes quit
    /// at once, without a checkpoint; the next start recovers from the
    /// WAL). Open connections break; new ones are refused.
    pub async fn crash(&self) {
        let data = self.data.to_string_lossy().into_owned();
        self.run("pg_ctl", &["stop", "-D", &data, "-m", "immediate", "-w"])
            .await;
    }

    /// Starts the server (again) and waits until it accepts connections.
    pub async fn restart(&self) {
        let data = self.data.to_string_lossy().into_owned();
        let log = self.log().to_string_lossy().into_owned();
        self.run(
            "pg_ctl",
            &["start", "-D", &data, "-l", &log, "-w", "-t", "60"],
        )
        .await;
    }

    fn log(&self) -> PathBuf {
        self.data.join("server.log")
    }

    /// The command for server binary `name`, as the OS user the server
    /// runs as.
    fn command(&self, name: &str, args: &[&str]) -> Command {
        let program = self.bin.join(name);
        match self.as_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(program).args(args);
                c
            }
            None => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
        }
    }

    /// Runs server binary `name`, or panics with its output and the
    /// server's log.
    async fn run(&self, name: &str, args: &[&str]) {
        let mut command = self.command(name, args);
        let shown = format!("{command:?}");
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap_or_else(|e| panic!("{shown} did not run to its end: {e}"));
        match output {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "{shown} failed ({}): {}{}\nthe server's log ({}) ends with:\n{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
                self.log().display(),
                log_tail(&self.log()),
            ),
            Err(e) => panic!(
                "{shown} could not be started ({e}){}",
                if self.as_user.is_some() {
                    ": as root the server's binaries run through runuser (util-linux) as user postgres, which Debian's postgresql package makes"
                } else {
                    ""
                }
            ),
        }
    }
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data.to_string_lossy().into_owned();
        let _ = self
            .command("pg_ctl", &["stop", "-D", &data, "-m", "immediate", "-w"])
            .output();
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.data);
        }
    }
}
