//! What can go wrong, each error naming what to fix, and the exit code it
//! ends the process with.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | the operation failed (a query or a publish was refused, a file could not be read) |
//! | 2 | usage: a flag, filter or argument is wrong (clap's own errors use it too) |
//! | 3 | a service is unreachable, or refuses the connection (its certificate, the CA, the client's certificate or password) |
//! | 4 | a canary replay came back dead: the fix did not work; nothing more was sent |
//! | 5 | a canary's outcome did not arrive within `--canary-timeout` |
//! | 6 | not found: no such dead letter, no such failed aggregate, no such saga, no such job |
//! | 7 | refused: confirmation declined, letters past the dedup retention without `--force`, another replay running, or a saga in a status the operation does not apply to |
//! | 8 | incompatible: a current schema breaks its snapshots in the mode checked (`schema check`, `schema record`) |
//! | 130 | interrupted (Ctrl-C): the letter in flight was finished; run again to go on |

/// The process's exit codes; see the module docs.
pub mod exit {
    /// Done.
    pub const OK: u8 = 0;
    /// The operation failed.
    pub const FAILURE: u8 = 1;
    /// Wrong usage.
    pub const USAGE: u8 = 2;
    /// A service did not answer, or refused the connection.
    pub const UNREACHABLE: u8 = 3;
    /// A canary came back dead.
    pub const CANARY_FAILED: u8 = 4;
    /// A canary's outcome did not arrive in time.
    pub const CANARY_TIMEOUT: u8 = 5;
    /// No such letter or aggregate.
    pub const NOT_FOUND: u8 = 6;
    /// Refused: not confirmed, or past the retention.
    pub const REFUSED: u8 = 7;
    /// A schema breaks compatibility with its snapshots.
    pub const INCOMPATIBLE: u8 = 8;
    /// Stopped by Ctrl-C.
    pub const INTERRUPTED: u8 = 130;
}

/// An error of the tool; its `Display` is the sentence printed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A flag or argument is wrong.
    #[error("{0}")]
    Usage(String),
    /// A service did not answer: which, where, and why.
    #[error("{service} at {address} is unreachable: {reason} (is it running? set {hint})")]
    Unreachable {
        /// `PostgreSQL`, `RabbitMQ`.
        service: &'static str,
        /// The address tried, without its password.
        address: String,
        /// What the client said.
        reason: String,
        /// The flag or variable that sets the address.
        hint: &'static str,
    },
    /// A service refused the connection: its TLS handshake or the login.
    #[error("{service} at {address} refused the connection: {reason} (check {hint})")]
    ConnectionRefused {
        /// `PostgreSQL`, `RabbitMQ`, `Kafka`.
        service: &'static str,
        /// The address tried, without its password.
        address: String,
        /// What failed and why, without any secret.
        reason: String,
        /// The flags and variables that set what was refused.
        hint: &'static str,
    },
    /// No letter has the id.
    #[error("no dead letter with id {id} in {place} (`consumer dead-letters list` shows the ids)")]
    NoSuchLetter {
        /// The id asked for.
        id: String,
        /// Where it was looked for.
        place: String,
    },
    /// No queue of that name.
    #[error(
        "no queue {queue} on RabbitMQ at {address} (dead-letter queues are named <work queue>.dlq)"
    )]
    NoSuchQueue {
        /// The queue asked for.
        queue: String,
        /// Where.
        address: String,
    },
    /// A handler the store has never seen.
    #[error("unknown handler {0:?}: no dead letter, dedup row or attempt names it")]
    UnknownHandler(String),
    /// No saga of that type and id.
    #[error("{0}")]
    NoSuchSaga(String),
    /// No job of that id (in that queue) waiting or running.
    #[error("{0}")]
    NoSuchJob(String),
    /// No failed aggregate of that name.
    #[error("no failed outbox aggregate {0} (`consumer outbox status` lists them)")]
    NoSuchAggregate(String),
    /// The operator declined, or did not confirm.
    #[error("{0}")]
    Refused(String),
    /// A canary letter was dead-lettered again.
    #[error("canary failed: {0}")]
    CanaryFailed(String),
    /// A canary's outcome never came.
    #[error("canary undecided: {0}")]
    CanaryTimeout(String),
    /// Ctrl-C stopped a replay between two letters.
    #[error(
        "interrupted after {0} letter(s) were sent; run the same command again to go on (the journal skips what was sent)"
    )]
    Interrupted(usize),
    /// A database statement failed.
    #[error("PostgreSQL: {0}")]
    Database(#[from] sqlx::Error),
    /// A broker operation failed.
    #[error("RabbitMQ: {0}")]
    Broker(String),
    /// A file or the terminal failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An imported line is not a letter.
    #[error("line {line} of the import is not a dead letter: {reason}")]
    BadImport {
        /// 1-based line number.
        line: usize,
        /// Why.
        reason: String,
    },
    /// Schemas that break compatibility; the reports are printed already.
    #[error(
        "{count} of {checked} event type(s) break compatibility in {mode}: {types} (see the report above)"
    )]
    Incompatible {
        /// How many break.
        count: usize,
        /// How many were checked.
        checked: usize,
        /// The mode.
        mode: consumer_contracts::compat::Mode,
        /// Their names, comma separated.
        types: String,
    },
    /// A schema the registry will not take as a subject's next version;
    /// its reasons are printed already.
    #[error(
        "the schema registry refuses this schema as the next version of `{subject}` (see the report above)"
    )]
    RegistryIncompatible {
        /// The subject.
        subject: String,
    },
    /// A snapshot or schema that cannot be used as it is: which file, and
    /// what to fix.
    #[error("{0}")]
    Schema(#[from] consumer_contracts::compat::CompatError),
    /// Anything else, said as a sentence.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// The exit code this error ends the process with.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::BadImport { .. } => exit::USAGE,
            Self::Unreachable { .. } | Self::ConnectionRefused { .. } => exit::UNREACHABLE,
            Self::NoSuchLetter { .. }
            | Self::NoSuchQueue { .. }
            | Self::UnknownHandler(_)
            | Self::NoSuchAggregate(_)
            | Self::NoSuchSaga(_)
            | Self::NoSuchJob(_) => exit::NOT_FOUND,
            Self::Refused(_) => exit::REFUSED,
            Self::CanaryFailed(_) => exit::CANARY_FAILED,
            Self::CanaryTimeout(_) => exit::CANARY_TIMEOUT,
            Self::Interrupted(_) => exit::INTERRUPTED,
            Self::Incompatible { .. } | Self::RegistryIncompatible { .. } => exit::INCOMPATIBLE,
            Self::Schema(consumer_contracts::compat::CompatError::Io { .. }) => exit::FAILURE,
            Self::Schema(_) => exit::USAGE,
            Self::Database(_) | Self::Broker(_) | Self::Io { .. } | Self::Other(_) => exit::FAILURE,
        }
    }

    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}

/// `url` without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The tool's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_left_out_of_addresses() {
        assert_eq!(
            redact("amqp://guest:secret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1/test"),
            "postgres://postgres@127.0.0.1/test"
        );
    }
}
