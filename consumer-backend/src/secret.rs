//! [`Secret`]: a password, token or key passphrase that the framework holds
//! without ever showing it, read from where production keeps it.
//!
//! ```
//! use consumer_backend::Secret;
//!
//! # fn demo() -> Result<(), consumer_backend::secret::SecretError> {
//! let password = Secret::from_env("KAFKA_PASSWORD")?; // or Secret::from_file("/run/secrets/kafka")?
//! assert_eq!(format!("{password:?}"), "Secret(environment variable KAFKA_PASSWORD)");
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A secret value: a password, a token, a private key's passphrase.
///
/// `Debug` shows where it came from (`Secret(environment variable
/// KAFKA_PASSWORD)`), never the value, and it has no `Display`: a secret
/// put in a log line, an error, a metric label or a dead letter's context
/// by mistake shows as that, not as itself. The value is reached only
/// through [`Secret::expose`], where a backend hands it to its client
/// library. Clones share the value.
#[derive(Clone)]
pub struct Secret {
    value: Arc<str>,
    origin: Origin,
}

#[derive(Clone)]
enum Origin {
    Given,
    Env(String),
    File(PathBuf),
}

/// A secret that could not be read. Names the variable or the file,
/// never a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The environment variable is not set.
    #[error("environment variable {var} is not set (it should hold the secret)")]
    MissingVariable {
        /// The variable.
        var: String,
    },
    /// The environment variable does not hold UTF-8.
    #[error("environment variable {var} does not hold UTF-8 text")]
    NotUnicode {
        /// The variable.
        var: String,
    },
    /// The file could not be read.
    #[error("the secret file {} cannot be read", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file does not hold UTF-8.
    #[error("the secret file {} does not hold UTF-8 text", path.display())]
    FileNotUnicode {
        /// The file.
        path: PathBuf,
    },
    /// The variable or the file is empty.
    #[error("{0} is empty (it should hold the secret)")]
    Empty(String),
}

impl Secret {
    /// A secret given in code (a test, or a value the application read
    /// from its own vault client).
    pub fn new(value: impl Into<String>) -> Self {
        Self {
            value: value.into().into(),
            origin: Origin::Given,
        }
    }

    /// The value of environment variable `var`, read now. Fails, naming
    /// the variable, when it is unset, empty or not UTF-8.
    pub fn from_env(var: &str) -> Result<Self, SecretError> {
        let value = std::env::var(var).map_err(|e| match e {
            std::env::VarError::NotPresent => SecretError::MissingVariable {
                var: var.to_owned(),
            },
            std::env::VarError::NotUnicode(_) => SecretError::NotUnicode {
                var: var.to_owned(),
            },
        })?;
        let secret = Self {
            value: value.into(),
            origin: Origin::Env(var.to_owned()),
        };
        secret.non_empty()
    }

    /// The content of file `path` (a mounted Kubernetes or Docker secret),
    /// read now, without one trailing line break (`\n` or `\r\n`, as
    /// `echo` and editors leave). Fails, naming the file, when it cannot
    /// be read, is empty or is not UTF-8.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, SecretError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| SecretError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        let mut text = String::from_utf8(bytes).map_err(|_| SecretError::FileNotUnicode {
            path: path.to_owned(),
        })?;
        if text.ends_with('\n') {
            text.pop();
            if text.ends_with('\r') {
                text.pop();
            }
        }
        let secret = Self {
            value: text.into(),
            origin: Origin::File(path.to_owned()),
        };
        secret.non_empty()
    }

    /// The value itself: for handing to a client library, never for a
    /// message.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// Whether `candidate` is the value, compared in constant time (a
    /// token offered to an endpoint: the time taken says nothing of how
    /// much of it was right).
    pub fn matches(&self, candidate: &str) -> bool {
        same_bytes(self.value.as_bytes(), candidate.as_bytes())
    }

    /// Where the value came from (`environment variable KAFKA_PASSWORD`,
    /// `file /run/secrets/kafka`, `a value given in code`), for messages
    /// that help an operator find a wrong secret without showing it.
    pub fn origin(&self) -> String {
        match &self.origin {
            Origin::Given => "a value given in code".to_owned(),
            Origin::Env(var) => format!("environment variable {var}"),
            Origin::File(path) => format!("file {}", path.display()),
        }
    }

    fn non_empty(self) -> Result<Self, SecretError> {
        if self.value.is_empty() {
            return Err(SecretError::Empty(self.origin()));
        }
        Ok(self)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({})", self.origin())
    }
}

/// Whether `a` and `b` are the same bytes, compared without stopping at
/// the first difference (for tokens: the time taken depends on their
/// lengths only).
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_says_where_a_secret_came_from_and_never_its_value() {
        let given = Secret::new("hunter2");
        assert_eq!(format!("{given:?}"), "Secret(a value given in code)");
        assert_eq!(given.expose(), "hunter2");

        let dir = std::env::temp_dir().join(format!("consumer-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("password");
        std::fs::write(&path, "s3cr3t-from-file\r\n").expect("write");
        let from_file = Secret::from_file(&path).expect("readable");
        assert_eq!(from_file.expose(), "s3cr3t-from-file");
        let shown = format!("{from_file:?} {:#?}", vec![from_file.clone()]);
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains(&path.display().to_string()), "{shown}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_missing_or_empty_secret_is_named_without_a_value() {
        let e = Secret::from_env("CONSUMER_SECRET_TEST_NEVER_SET").expect_err("unset");
        assert_eq!(
            e.to_string(),
            "environment variable CONSUMER_SECRET_TEST_NEVER_SET is not set (it should hold the secret)"
        );
        let e = Secret::from_file("/nonexistent/consumer/secret").expect_err("missing");
        assert!(
            e.to_string()
                .starts_with("the secret file /nonexistent/consumer/secret cannot be read"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("consumer-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("empty");
        std::fs::write(&path, "\n").expect("write");
        let e = Secret::from_file(&path).expect_err("empty");
        assert!(
            e.to_string()
                .ends_with("is empty (it should hold the secret)"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
