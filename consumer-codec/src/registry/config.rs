//! Where the registry is and how to talk to it: URL, credentials, timeouts.

use std::fmt;
use std::time::Duration;

/// Credentials sent with every request. `Debug` shows which kind, never
/// the secret.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryAuth {
    /// HTTP basic auth (Confluent Cloud's API key and secret).
    Basic {
        /// The user name (or API key).
        user: String,
        /// The password (or API secret).
        password: String,
    },
    /// A bearer token (OAuth 2 access token).
    Bearer(String),
}

impl fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Basic { user, .. } => f
                .debug_struct("Basic")
                .field("user", user)
                .field("password", &"<redacted>")
                .finish(),
            Self::Bearer(_) => f.debug_tuple("Bearer").field(&"<redacted>").finish(),
        }
    }
}

/// The settings of a [`RegistryClient`](super::RegistryClient): the base URL
/// of a Confluent-compatible API, credentials, and how long to wait.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    pub(crate) url: String,
    pub(crate) auth: Option<RegistryAuth>,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

impl RegistryConfig {
    /// A registry at `url`: Confluent's root (`http://host:8081`) or
    /// Apicurio's compatible API (`http://host:8080/apis/ccompat/v7`). No
    /// credentials; 10 s per request, 5 s to connect.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            auth: None,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// Sends HTTP basic credentials with every request.
    pub fn with_basic_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.auth = Some(RegistryAuth::Basic {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn with_bearer_token(mut self, token: impl Into<String>) -> Self {
        self.auth = Some(RegistryAuth::Bearer(token.into()));
        self
    }

    /// How long one request may take, connecting included, before it fails
    /// as transient.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long connecting may take before the request fails as transient.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The base URL requests are made under.
    pub fn url(&self) -> &str {
        &self.url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_secret() {
        let basic = RegistryConfig::new("http://r").with_basic_auth("key", "s3cret");
        let bearer = RegistryConfig::new("http://r").with_bearer_token("t0ken");
        let shown = format!("{basic:?} {bearer:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("t0ken"),
            "{shown}"
        );
        assert!(shown.contains("key"), "{shown}");
    }
}
