//! [`AmqpEndpoint`]: the broker a client of this crate talks to (its URI,
//! credentials kept apart from it, TLS), and the one place where every
//! connection of the crate is opened, so that each one gets the same TLS
//! settings and the same sentence when the broker refuses it.

use std::fmt;

use consumer_backend::Secret;
use lapin::tcp::OwnedTLSConfig;
use lapin::uri::{AMQPScheme, AMQPUri, AMQPUserInfo};
use lapin::{Connection, ConnectionProperties, ErrorKind};

use crate::error::{Error, Result};
use crate::tls::AmqpTls;

/// Where a RabbitMQ client connects and how it proves who it is: the URI
/// (`amqp://host:port/vhost`, or `amqps://` for TLS), the user and
/// password (in the URI, or kept apart from it with
/// [`with_credentials`](Self::with_credentials)), and TLS settings beyond
/// the system's root certificates ([`with_tls`](Self::with_tls)).
///
/// Every builder of this crate takes one where it takes a URI (a URI
/// converts into one), and its connections are opened by
/// [`connect`](Self::connect):
///
/// * a broker that refuses the login is [`Error::AccessRefused`], one
///   whose TLS handshake fails is [`Error::Tls`], each naming RabbitMQ,
///   its address and the cause, and neither retriable, so a consumer
///   stops at start instead of reconnecting in a loop;
/// * `Debug`, and every error of this crate, show the URI without its
///   password, and never the [`Secret`] given here;
/// * an `amqps://` URI in a build without the `tls` feature is refused
///   ([`Error::NeedsTls`]) rather than opened in plain text.
///
/// ```
/// use consumer_amqp::{AmqpEndpoint, AmqpTls};
/// use consumer_backend::Secret;
///
/// // Amazon MQ, CloudAMQP: amqps:// and the system's roots are enough.
/// let endpoint = AmqpEndpoint::new("amqps://b-1234.mq.eu-west-1.amazonaws.com:5671/%2f")
///     .with_credentials("billing", Secret::new("from a vault")); // Secret::from_env("AMQP_PASSWORD")?
/// // A private CA and a client certificate:
/// let private = AmqpEndpoint::new("amqps://rabbit.internal:5671/%2f")
///     .with_credentials("billing", Secret::new("from a vault"))
///     .with_tls(AmqpTls::new().with_ca_file("/etc/rabbitmq/ca.pem"));
/// assert!(!format!("{endpoint:?} {private:?}").contains("from a vault"));
/// ```
#[derive(Clone)]
#[must_use]
pub struct AmqpEndpoint {
    uri: String,
    credentials: Option<(String, Secret)>,
    tls: Option<AmqpTls>,
}

impl fmt::Debug for AmqpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpEndpoint")
            .field("uri", &redact(&self.uri))
            .field("credentials", &self.credentials)
            .field("tls", &self.tls)
            .finish()
    }
}

impl From<String> for AmqpEndpoint {
    fn from(uri: String) -> Self {
        Self::new(uri)
    }
}

impl From<&String> for AmqpEndpoint {
    fn from(uri: &String) -> Self {
        Self::new(uri.clone())
    }
}

impl From<&str> for AmqpEndpoint {
    fn from(uri: &str) -> Self {
        Self::new(uri)
    }
}

impl AmqpEndpoint {
    /// The broker at `uri`; nothing is contacted until a connection opens.
    pub fn new(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            credentials: None,
            tls: None,
        }
    }

    /// Logs in as `user` with `password` (from a file or the environment:
    /// [`Secret::from_file`], [`Secret::from_env`]) instead of the URI's
    /// user info, so that the URI holds no secret.
    pub fn with_credentials(mut self, user: impl Into<String>, password: Secret) -> Self {
        self.credentials = Some((user.into(), password));
        self
    }

    /// TLS settings for an `amqps://` URI beyond the system's root
    /// certificates: a private CA, a client certificate. Given with an
    /// `amqp://` URI, connecting fails with [`Error::InvalidUri`].
    pub fn with_tls(mut self, tls: AmqpTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The URI without its password, for messages.
    pub fn redacted_uri(&self) -> String {
        redact(&self.uri)
    }

    /// `server.address` and `server.port`: the URI's host, and its port or
    /// the scheme's default (5672, or 5671 for `amqps://`).
    pub fn server(&self) -> Option<(&str, u16)> {
        server_of(&self.uri)
    }

    /// `host:port`, for messages (empty when the URI has no host).
    pub(crate) fn address(&self) -> String {
        self.server()
            .map_or_else(String::new, |(h, p)| format!("{h}:{p}"))
    }

    /// Opens a connection named `name` (as RabbitMQ's connection list
    /// shows it). A broker that refuses the TLS handshake or the login is
    /// [`Error::Tls`] or [`Error::AccessRefused`] (not retriable); one that
    /// cannot be reached is [`Error::Amqp`] (retriable).
    pub async fn connect(&self, name: impl Into<String>) -> Result<Connection> {
        let mut uri: AMQPUri = self.uri.parse().map_err(|reason| Error::InvalidUri {
            uri: redact(&self.uri),
            reason,
        })?;
        if let Some((user, password)) = &self.credentials {
            uri.authority.userinfo = AMQPUserInfo {
                username: user.clone(),
                password: password.expose().to_owned(),
            };
        }
        let tls = match (uri.scheme == AMQPScheme::AMQPS, &self.tls) {
            // lapin without a TLS library would open amqps:// in plain text.
            (true, _) if !cfg!(feature = "tls") => {
                return Err(Error::NeedsTls {
                    uri: redact(&self.uri),
                });
            }
            (true, Some(tls)) => tls.load()?,
            (true, None) => OwnedTLSConfig::default(),
            (false, Some(_)) => {
                return Err(Error::InvalidUri {
                    uri: redact(&self.uri),
                    reason: "TLS settings were given for an amqp:// URI: use amqps://".to_owned(),
                });
            }
            (false, None) => OwnedTLSConfig::default(),
        };
        let user = uri.authority.userinfo.username.clone();
        let shows_certificate = self
            .tls
            .as_ref()
            .is_some_and(AmqpTls::has_client_certificate);
        let runtime = lapin::runtime::default_runtime().map_err(Error::amqp("connection"))?;
        let props = ConnectionProperties::default().with_connection_name(name.into().into());
        Connection::connect_uri_with_config(uri, props, tls, runtime)
            .await
            .map_err(|source| refused(self.address(), &user, shows_certificate, source))
    }
}

/// A connection failure as the broker's refusal of this client, when it is
/// one; else as the connection error it is.
/// The longest closing a connection given up on may wait for the broker:
/// one lost under the close may never answer it, and the caller is about
/// to reconnect.
const LET_GO_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Closes `connection`, which broke or is given up on, waiting at most
/// [`LET_GO_LIMIT`]; whatever the broker answers, the caller reconnects.
pub(crate) async fn let_go(connection: &Connection, why: &str) {
    let _ = tokio::time::timeout(LET_GO_LIMIT, connection.close(200, why.into())).await;
}

fn refused(server: String, user: &str, shows_certificate: bool, source: lapin::Error) -> Error {
    if let ErrorKind::ProtocolError(amqp) = source.kind()
        && amqp.get_id() == 403
    {
        return Error::AccessRefused {
            server,
            user: user.to_owned(),
            reason: amqp.get_message().to_string(),
        };
    }
    if let ErrorKind::IOError(io) = source.kind() {
        let reason = io.to_string();
        if let Some(cause) = tls_cause(&reason) {
            return Error::Tls {
                server,
                cause,
                reason,
            };
        }
        if shows_certificate
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
            )
        {
            return Error::TlsClosed { server, reason };
        }
    }
    Error::Amqp {
        context: "connection",
        source,
    }
}

/// What a TLS failure rustls reported means, in words; `None` when the
/// I/O error is not a TLS failure.
fn tls_cause(reason: &str) -> Option<&'static str> {
    let lower = reason.to_ascii_lowercase();
    if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
        Some(
            "the broker's certificate is not signed by a CA this client trusts (AmqpTls::with_ca_file adds one)",
        )
    } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        Some("the broker's certificate does not name the URI's host")
    } else if lower.contains("invalid peer certificate") {
        Some("the broker's certificate is not valid (expired, revoked or malformed)")
    } else if lower.contains("received fatal alert")
        && [
            "unknownca",
            "badcertificate",
            "certificaterequired",
            "certificateunknown",
        ]
        .iter()
        .any(|a| lower.contains(a))
    {
        Some(
            "the broker refused this client's certificate (not signed by a CA the broker trusts, or none was sent where it requires one)",
        )
    } else if lower.contains("received fatal alert")
        || lower.contains("corrupt message")
        || lower.contains("invalid content type")
    {
        Some("the TLS handshake failed (is the port a TLS listener?)")
    } else {
        None
    }
}

/// `uri` without its password, for messages.
fn redact(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => uri.to_owned(),
        },
        None => uri.to_owned(),
    }
}

/// `server.address` and `server.port` of an AMQP URI: its host, and its
/// port or the scheme's default.
fn server_of(uri: &str) -> Option<(&str, u16)> {
    let (scheme, rest) = uri.split_once("://")?;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit('@').next()?;
    let default = if scheme.eq_ignore_ascii_case("amqps") {
        5671
    } else {
        5672
    };
    let (host, port) = match host_port.strip_prefix('[') {
        // [IPv6]:port
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default,
    };
    (!host.is_empty()).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_the_uris_host_and_port() {
        assert_eq!(
            server_of("amqp://guest:guest@127.0.0.1:5672/%2f"),
            Some(("127.0.0.1", 5672))
        );
        assert_eq!(
            server_of("amqps://rabbit.example"),
            Some(("rabbit.example", 5671))
        );
        assert_eq!(server_of("amqp://u:p@[::1]:5673/v"), Some(("::1", 5673)));
        assert_eq!(server_of("amqp:///"), None);
    }

    #[test]
    fn passwords_are_left_out_of_uris_and_debug() {
        assert_eq!(
            redact("amqps://app:s3cret@mq.example:5671/prod?heartbeat=10"),
            "amqps://app:***@mq.example:5671/prod?heartbeat=10"
        );
        assert_eq!(
            redact("amqp://127.0.0.1:5672/%2f"),
            "amqp://127.0.0.1:5672/%2f"
        );
        let endpoint = AmqpEndpoint::new("amqps://app:s3cret@mq.example/prod")
            .with_credentials("app", Secret::new("other-s3cret"));
        let shown = format!("{endpoint:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[tokio::test]
    async fn amqps_is_never_opened_in_plain_text_and_tls_settings_need_amqps() {
        let e = AmqpEndpoint::new("amqp://127.0.0.1:1/%2f")
            .with_tls(AmqpTls::new())
            .connect("test")
            .await
            .expect_err("TLS settings with amqp://");
        assert!(matches!(e, Error::InvalidUri { .. }), "{e}");
        assert!(!e.is_retriable());
        if !cfg!(feature = "tls") {
            let e = AmqpEndpoint::new("amqps://127.0.0.1:1/%2f")
                .connect("test")
                .await
                .expect_err("no TLS in this build");
            assert!(matches!(e, Error::NeedsTls { .. }), "{e}");
        }
    }

    #[test]
    fn tls_failures_are_told_by_their_cause() {
        for (reason, cause) in [
            (
                "invalid peer certificate: UnknownIssuer",
                "not signed by a CA this client trusts",
            ),
            (
                "invalid peer certificate: NotValidForName",
                "does not name the URI's host",
            ),
            (
                "received fatal alert: UnknownCA",
                "refused this client's certificate",
            ),
            (
                "received fatal alert: CertificateRequired",
                "refused this client's certificate",
            ),
        ] {
            assert_eq!(
                tls_cause(reason).map(|c| c.contains(cause)),
                Some(true),
                "{reason}"
            );
        }
        assert_eq!(tls_cause("Connection refused (os error 111)"), None);
    }
}
