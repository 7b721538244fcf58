//! [`KafkaSecurity`] and [`KafkaSasl`]: how a client of this crate
//! encrypts its link to Kafka and proves who it is, as librdkafka's
//! `security.protocol`, `ssl.*` and `sasl.*` properties; and which
//! properties hold secrets, so that no `Debug` or error shows them.
//!
//! Needs the crate's `tls` feature (librdkafka with OpenSSL): without it,
//! a client with a security protocol other than `PLAINTEXT` fails to
//! start with [`Error::Config`](crate::Error::Config) saying so.

use std::path::PathBuf;

use consumer_backend::Secret;
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;

/// librdkafka properties whose values are secrets: never shown by this
/// crate's `Debug` output or errors. A key containing `password` or
/// `secret` counts too.
const SECRET_PROPERTIES: &[&str] = &[
    "sasl.password",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl_key",
    "ssl.keystore.password",
    "ssl.truststore.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.private.key.passphrase",
];

/// What is shown instead of a secret property's value.
pub(crate) const REDACTED: &str = "[redacted]";

/// Whether librdkafka property `key` holds a secret.
pub(crate) fn is_secret_property(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_PROPERTIES.contains(&key.as_str()) || key.contains("password") || key.contains("secret")
}

/// `properties` as `Debug` may show them: secret values replaced by
/// `[redacted]`.
pub(crate) fn redacted(properties: &[(String, String)]) -> Vec<(&str, &str)> {
    properties
        .iter()
        .map(|(k, v)| {
            let v = if is_secret_property(k) {
                REDACTED
            } else {
                v.as_str()
            };
            (k.as_str(), v)
        })
        .collect()
}

/// `error` without the value of a secret property it quotes (librdkafka's
/// refusal of a property's value names the value).
pub(crate) fn redact_error(error: KafkaError) -> KafkaError {
    match error {
        KafkaError::ClientConfig(res, desc, key, _) if is_secret_property(&key) => {
            KafkaError::ClientConfig(res, desc, key, REDACTED.to_owned())
        }
        e => e,
    }
}

/// How a client reaches a secured Kafka: TLS, SASL, or both.
///
/// Every client of this crate takes one: [`KafkaSourceBuilder::with_security`],
/// [`KafkaPublisherBuilder::with_security`], [`Topics::create_with_security`].
/// With it, `connect` checks the link once before it returns (see
/// [`KafkaSourceBuilder::with_security`]), so that a certificate or a
/// password the broker refuses fails at start with
/// [`Error::Refused`](crate::Error::Refused) instead of being retried in
/// the background for ever.
///
/// * TLS checks the broker's certificate against the system's root
///   certificates, or against the CA of [`with_ca_file`](Self::with_ca_file),
///   and checks that it names the host connected to
///   (`ssl.endpoint.identification.algorithm=https`).
/// * Secrets stay [`Secret`]s until they are handed to librdkafka: the
///   `Debug` of this type, of the builders and of this crate's errors
///   never shows them.
///
/// ```
/// use consumer_kafka::{KafkaSasl, KafkaSecurity};
/// use consumer_backend::Secret;
///
/// // Confluent Cloud, MSK with SASL/SCRAM: TLS and a user with a password.
/// let security = KafkaSecurity::sasl_ssl(KafkaSasl::scram_sha_512(
///     "billing",
///     Secret::new("from a vault"), // Secret::from_env("KAFKA_PASSWORD")? in a service
/// ))
/// .with_ca_file("/etc/kafka/ca.pem"); // only for a private CA
/// assert_eq!(security.protocol(), "SASL_SSL");
/// assert!(!format!("{security:?}").contains("from a vault"));
/// ```
///
/// [`KafkaSourceBuilder::with_security`]: crate::KafkaSourceBuilder::with_security
/// [`KafkaPublisherBuilder::with_security`]: crate::KafkaPublisherBuilder::with_security
/// [`Topics::create_with_security`]: crate::Topics::create_with_security
#[derive(Debug, Clone)]
#[must_use]
pub struct KafkaSecurity {
    protocol: &'static str,
    ca_file: Option<PathBuf>,
    client_certificate: Option<(PathBuf, PathBuf)>,
    key_password: Option<Secret>,
    sasl: Option<KafkaSasl>,
}

impl KafkaSecurity {
    /// TLS (`security.protocol=SSL`): encryption and the broker's
    /// certificate checked; the client is anonymous unless it shows a
    /// certificate ([`with_client_certificate`](Self::with_client_certificate):
    /// mutual TLS, as MSK's TLS authentication).
    pub fn ssl() -> Self {
        Self::with_protocol("SSL", None)
    }

    /// TLS and SASL (`SASL_SSL`): what Confluent Cloud and MSK with
    /// SASL/SCRAM require.
    pub fn sasl_ssl(sasl: KafkaSasl) -> Self {
        Self::with_protocol("SASL_SSL", Some(sasl))
    }

    /// SASL without TLS (`SASL_PLAINTEXT`): nothing is encrypted, and
    /// [`KafkaSasl::plain`] sends the password as it is; for a network
    /// that is private end to end only.
    pub fn sasl_plaintext(sasl: KafkaSasl) -> Self {
        Self::with_protocol("SASL_PLAINTEXT", Some(sasl))
    }

    fn with_protocol(protocol: &'static str, sasl: Option<KafkaSasl>) -> Self {
        Self {
            protocol,
            ca_file: None,
            client_certificate: None,
            key_password: None,
            sasl,
        }
    }

    /// Trusts the CA certificates (PEM) in `path` instead of the system's
    /// (`ssl.ca.location`): for a private CA, or a managed service's own.
    /// librdkafka reads the file when a client is created.
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Shows the client certificate in `cert_file` (PEM, its chain
    /// after it) with its private key in `key_file` (PEM) to the broker
    /// (`ssl.certificate.location`, `ssl.key.location`).
    pub fn with_client_certificate(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> Self {
        self.client_certificate = Some((cert_file.into(), key_file.into()));
        self
    }

    /// The passphrase of an encrypted client key (`ssl.key.password`).
    pub fn with_client_key_password(mut self, password: Secret) -> Self {
        self.key_password = Some(password);
        self
    }

    /// librdkafka's `security.protocol`: `SSL`, `SASL_SSL` or
    /// `SASL_PLAINTEXT`.
    pub fn protocol(&self) -> &'static str {
        self.protocol
    }

    /// The SASL settings, if any.
    pub fn sasl(&self) -> Option<&KafkaSasl> {
        self.sasl.as_ref()
    }

    /// Sets these settings on a librdkafka configuration of the
    /// application's own (an rdkafka client this crate does not make).
    pub fn apply_to(&self, config: &mut ClientConfig) {
        for (k, v) in self.properties() {
            config.set(k, v);
        }
    }

    /// Checks, as the builders' `connect` does, that the brokers at
    /// `brokers` accept these settings: `Ok` once they answer (or when none
    /// can be reached: librdkafka clients retry that), and
    /// [`Error::Refused`](crate::Error::Refused), naming the cause, when
    /// one refuses the TLS handshake or the SASL credentials.
    pub async fn check(&self, brokers: &str) -> Result<(), crate::Error> {
        crate::start_check::before_connect(brokers, Some(self), &[])
            .await
            .map(drop)
    }

    /// The librdkafka properties, secrets included, in the order they are
    /// set (before the caller's own, which may override them).
    pub(crate) fn properties(&self) -> Vec<(String, String)> {
        let mut p = Properties::default();
        p.set("security.protocol", self.protocol);
        if self.protocol != "SASL_PLAINTEXT" {
            p.set("ssl.endpoint.identification.algorithm", "https");
        }
        if let Some(ca) = &self.ca_file {
            p.set("ssl.ca.location", ca.display());
        }
        if let Some((cert, key)) = &self.client_certificate {
            p.set("ssl.certificate.location", cert.display());
            p.set("ssl.key.location", key.display());
        }
        if let Some(password) = &self.key_password {
            p.set("ssl.key.password", password.expose());
        }
        if let Some(sasl) = &self.sasl {
            sasl.properties(&mut p);
        }
        p.0
    }
}

/// Properties in the order they are set.
#[derive(Default)]
struct Properties(Vec<(String, String)>);

impl Properties {
    fn set(&mut self, key: &str, value: impl std::fmt::Display) {
        self.0.push((key.to_owned(), value.to_string()));
    }
}

/// The setting this build of librdkafka cannot honour, if any: TLS, and
/// the SASL mechanisms that need OpenSSL, without the `tls` feature.
pub(crate) fn needs_tls(properties: &[(String, String)]) -> Option<String> {
    if cfg!(feature = "tls") {
        return None;
    }
    let last = |key: &str| {
        properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.to_ascii_uppercase())
    };
    if let Some(protocol) = last("security.protocol").filter(|p| p.contains("SSL")) {
        return Some(format!("security.protocol={protocol}"));
    }
    last("sasl.mechanism")
        .filter(|m| m.starts_with("SCRAM") || m == "OAUTHBEARER")
        .map(|m| format!("sasl.mechanism={m}"))
}

/// The SASL mechanism and credentials of a [`KafkaSecurity`].
///
/// PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER are built into
/// librdkafka with the `tls` feature; GSSAPI (Kerberos) is not (it needs
/// the system's Cyrus SASL library).
#[derive(Debug, Clone)]
pub struct KafkaSasl {
    mechanism: &'static str,
    username: Option<String>,
    password: Option<Secret>,
    oauthbearer: Option<OAuthBearer>,
}

#[derive(Debug, Clone)]
enum OAuthBearer {
    Oidc {
        token_endpoint: String,
        client_id: String,
        client_secret: Secret,
        scope: Option<String>,
    },
    Unsecured {
        principal: String,
    },
}

impl KafkaSasl {
    /// SASL/PLAIN: the password goes to the broker as it is (under TLS
    /// with [`KafkaSecurity::sasl_ssl`]); Confluent Cloud's API keys use
    /// it (the key as user name, its secret as password).
    pub fn plain(username: impl Into<String>, password: Secret) -> Self {
        Self::with_password("PLAIN", username, password)
    }

    /// SASL/SCRAM-SHA-256: the password never crosses the network.
    pub fn scram_sha_256(username: impl Into<String>, password: Secret) -> Self {
        Self::with_password("SCRAM-SHA-256", username, password)
    }

    /// SASL/SCRAM-SHA-512 (what MSK's SASL/SCRAM uses).
    pub fn scram_sha_512(username: impl Into<String>, password: Secret) -> Self {
        Self::with_password("SCRAM-SHA-512", username, password)
    }

    /// SASL/OAUTHBEARER with tokens librdkafka fetches itself from an
    /// OpenID Connect token endpoint (client credentials grant):
    /// `sasl.oauthbearer.method=oidc`. librdkafka needs libcurl for it,
    /// which the `tls` feature does not build: add rdkafka's
    /// `curl-static` feature to the application's `Cargo.toml`, or the
    /// client fails to start with a sentence saying so.
    pub fn oauthbearer_oidc(
        token_endpoint: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: Secret,
    ) -> Self {
        Self::with_oauthbearer(OAuthBearer::Oidc {
            token_endpoint: token_endpoint.into(),
            client_id: client_id.into(),
            client_secret,
            scope: None,
        })
    }

    /// The OIDC token request's `scope` (an [`oauthbearer_oidc`](Self::oauthbearer_oidc)
    /// setting; ignored otherwise).
    #[must_use]
    pub fn with_scope(mut self, scope: impl Into<String>) -> Self {
        if let Some(OAuthBearer::Oidc { scope: s, .. }) = &mut self.oauthbearer {
            *s = Some(scope.into());
        }
        self
    }

    /// SASL/OAUTHBEARER with an unsigned token naming `principal`, which
    /// only a development broker accepts (Kafka's default OAUTHBEARER
    /// validator, as in the test services); never for production.
    pub fn oauthbearer_unsecured(principal: impl Into<String>) -> Self {
        Self::with_oauthbearer(OAuthBearer::Unsecured {
            principal: principal.into(),
        })
    }

    fn with_password(
        mechanism: &'static str,
        username: impl Into<String>,
        password: Secret,
    ) -> Self {
        Self {
            mechanism,
            username: Some(username.into()),
            password: Some(password),
            oauthbearer: None,
        }
    }

    fn with_oauthbearer(config: OAuthBearer) -> Self {
        Self {
            mechanism: "OAUTHBEARER",
            username: None,
            password: None,
            oauthbearer: Some(config),
        }
    }

    /// librdkafka's `sasl.mechanism`.
    pub fn mechanism(&self) -> &'static str {
        self.mechanism
    }

    /// The user name, for mechanisms that have one.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    fn properties(&self, p: &mut Properties) {
        p.set("sasl.mechanism", self.mechanism);
        if let Some(user) = &self.username {
            p.set("sasl.username", user);
        }
        if let Some(password) = &self.password {
            p.set("sasl.password", password.expose());
        }
        match &self.oauthbearer {
            Some(OAuthBearer::Oidc {
                token_endpoint,
                client_id,
                client_secret,
                scope,
            }) => {
                p.set("sasl.oauthbearer.method", "oidc");
                p.set("sasl.oauthbearer.token.endpoint.url", token_endpoint);
                p.set("sasl.oauthbearer.client.id", client_id);
                p.set("sasl.oauthbearer.client.secret", client_secret.expose());
                if let Some(scope) = scope {
                    p.set("sasl.oauthbearer.scope", scope);
                }
            }
            Some(OAuthBearer::Unsecured { principal }) => {
                p.set("enable.sasl.oauthbearer.unsecure.jwt", "true");
                p.set("sasl.oauthbearer.config", format!("principal={principal}"));
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_of(security: &KafkaSecurity) -> ClientConfig {
        let mut config = ClientConfig::new();
        security.apply_to(&mut config);
        config
    }

    #[test]
    fn the_settings_become_librdkafkas_properties() {
        let config = config_of(
            &KafkaSecurity::sasl_ssl(KafkaSasl::scram_sha_256("billing", Secret::new("pw-1")))
                .with_ca_file("/etc/ca.pem")
                .with_client_certificate("/etc/client.pem", "/etc/client.key")
                .with_client_key_password(Secret::new("pw-2")),
        );
        for (key, value) in [
            ("security.protocol", "SASL_SSL"),
            ("ssl.endpoint.identification.algorithm", "https"),
            ("ssl.ca.location", "/etc/ca.pem"),
            ("ssl.certificate.location", "/etc/client.pem"),
            ("ssl.key.location", "/etc/client.key"),
            ("ssl.key.password", "pw-2"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.username", "billing"),
            ("sasl.password", "pw-1"),
        ] {
            assert_eq!(config.get(key), Some(value), "{key}");
        }
        let oidc = config_of(&KafkaSecurity::sasl_ssl(
            KafkaSasl::oauthbearer_oidc("https://idp/token", "svc", Secret::new("pw-3"))
                .with_scope("kafka"),
        ));
        assert_eq!(oidc.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert_eq!(oidc.get("sasl.oauthbearer.method"), Some("oidc"));
        assert_eq!(oidc.get("sasl.oauthbearer.scope"), Some("kafka"));
        assert_eq!(oidc.get("sasl.oauthbearer.client.secret"), Some("pw-3"));
    }

    #[test]
    fn librdkafka_has_what_the_tls_feature_promises() {
        let native = ClientConfig::new()
            .create_native_config()
            .expect("a native configuration");
        let features = native
            .get("builtin.features")
            .expect("librdkafka's builtin.features");
        let has = |f: &str| features.split(',').any(|x| x == f);
        let sasl_ssl = [("security.protocol".to_owned(), "SASL_SSL".to_owned())];
        if cfg!(feature = "tls") {
            for f in ["ssl", "sasl_plain", "sasl_scram", "sasl_oauthbearer"] {
                assert!(has(f), "{f} is missing from {features}");
            }
            assert_eq!(needs_tls(&sasl_ssl), None);
        } else {
            assert!(!has("ssl"), "{features}");
            assert_eq!(
                needs_tls(&sasl_ssl).as_deref(),
                Some("security.protocol=SASL_SSL")
            );
        }
    }

    #[test]
    fn secrets_are_left_out_of_debug_and_of_refused_properties() {
        let security =
            KafkaSecurity::sasl_ssl(KafkaSasl::plain("key", Secret::new("top-secret-value")))
                .with_client_key_password(Secret::new("another-secret-value"));
        let shown = format!("{security:?}");
        assert!(!shown.contains("secret-value"), "{shown}");

        let properties = vec![
            ("sasl.password".to_owned(), "p1-secret".to_owned()),
            ("SSL.KEY.PEM".to_owned(), "p2-secret".to_owned()),
            ("my.custom.password".to_owned(), "p3-secret".to_owned()),
            ("linger.ms".to_owned(), "5".to_owned()),
        ];
        let shown = format!("{:?}", redacted(&properties));
        assert!(!shown.contains("-secret"), "{shown}");
        assert!(shown.contains("\"linger.ms\", \"5\""), "{shown}");

        let refused = KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value".to_owned(),
            "sasl.oauthbearer.config".to_owned(),
            "principal=x secret-token".to_owned(),
        );
        let shown = format!("{0} {0:?}", redact_error(refused));
        assert!(!shown.contains("secret-token"), "{shown}");
        assert!(shown.contains("sasl.oauthbearer.config"), "{shown}");
    }
}
