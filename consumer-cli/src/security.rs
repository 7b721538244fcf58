//! The secure-connection flags ([`SecurityArgs`](crate::args::SecurityArgs)) as each client's
//! settings: sqlx's TLS options and password for PostgreSQL, an
//! [`AmqpEndpoint`] for RabbitMQ, a [`KafkaSecurity`] for Kafka; and a
//! service's refusal of them as the sentence the tool prints.

use std::path::Path;

#[cfg(feature = "amqp")]
use consumer_amqp::{AmqpEndpoint, AmqpTls};
use consumer_core::Secret;
#[cfg(feature = "kafka")]
use consumer_kafka::{KafkaSasl, KafkaSecurity};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::args::Services;
#[cfg(feature = "kafka")]
use crate::args::{KafkaMechanismArg, KafkaProtocolArg};
use crate::error::{Error, Result};

/// The password in `file`, else in the first of `vars` that is set.
fn password(file: Option<&Path>, vars: &[&str]) -> Result<Option<Secret>> {
    if let Some(path) = file {
        return Secret::from_file(path)
            .map(Some)
            .map_err(|e| Error::Usage(e.to_string()));
    }
    for var in vars {
        if std::env::var_os(var).is_some() {
            return Secret::from_env(var)
                .map(Some)
                .map_err(|e| Error::Usage(e.to_string()));
        }
    }
    Ok(None)
}

/// Fails, naming `flag`, when this build has no TLS.
fn needs_tls_build(flag: &str) -> Result<()> {
    if cfg!(feature = "tls") {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "{flag} needs TLS, and this build of consumer has none: build it with the `tls` feature (on by default)"
    )))
}

/// `options` with the flags' CA (and `sslmode=verify-full`), client
/// certificate and password.
pub fn postgres(services: &Services, mut options: PgConnectOptions) -> Result<PgConnectOptions> {
    let s = &services.security;
    if let Some(ca) = &s.database_ca {
        needs_tls_build("--database-ca")?;
        options = options.ssl_mode(PgSslMode::VerifyFull).ssl_root_cert(ca);
    }
    if let (Some(cert), Some(key)) = (&s.database_cert, &s.database_key) {
        needs_tls_build("--database-cert")?;
        options = options.ssl_client_cert(cert).ssl_client_key(key);
    }
    if let Some(pw) = password(
        s.database_password_file.as_deref(),
        &["DATABASE_PASSWORD", "PGPASSWORD"],
    )? {
        options = options.password(pw.expose());
    }
    Ok(options)
}

/// PostgreSQL's refusal of the connection (TLS, credentials), as the
/// tool's error; `None` for any other failure.
pub fn postgres_refusal(e: &sqlx::Error, address: &str) -> Option<Error> {
    let reason = match e {
        sqlx::Error::Tls(tls) => format!("the TLS handshake failed: {tls}"),
        // rustls' refusals come through as I/O errors.
        sqlx::Error::Io(io) if is_tls_failure(&io.to_string()) => {
            format!("the TLS handshake failed: {io}")
        }
        // 28000 (no pg_hba.conf entry: TLS required, user not allowed),
        // 28P01 (a wrong password).
        sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("28")) => {
            format!("it refused the login: {}", db.message())
        }
        _ => return None,
    };
    Some(Error::ConnectionRefused {
        service: "PostgreSQL",
        address: address.to_owned(),
        reason,
        hint: "--database-ca, --database-cert/--database-key, --database-password-file or DATABASE_PASSWORD",
    })
}

/// Whether an I/O error's words are a TLS refusal (a certificate not
/// trusted, an alert from the server).
fn is_tls_failure(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("certificate") || lower.contains("fatal alert")
}

/// The RabbitMQ endpoint of `--amqp-url` with the flags' user, password
/// and TLS files.
#[cfg(feature = "amqp")]
pub fn amqp_endpoint(services: &Services) -> Result<AmqpEndpoint> {
    let s = &services.security;
    let mut endpoint = AmqpEndpoint::new(services.amqp_url.clone());
    if let Some(user) = &s.amqp_user {
        let pw =
            password(s.amqp_password_file.as_deref(), &["AMQP_PASSWORD"])?.ok_or_else(|| {
                Error::Usage(format!(
                    "--amqp-user {user} needs a password: --amqp-password-file or AMQP_PASSWORD"
                ))
            })?;
        endpoint = endpoint.with_credentials(user.clone(), pw);
    }
    let mut tls = None;
    if let Some(ca) = &s.amqp_ca {
        needs_tls_build("--amqp-ca")?;
        tls = Some(AmqpTls::new().with_ca_file(ca));
    }
    if let (Some(cert), Some(key)) = (&s.amqp_cert, &s.amqp_key) {
        needs_tls_build("--amqp-cert")?;
        tls = Some(tls.unwrap_or_default().with_client_certificate(cert, key));
    }
    if let Some(tls) = tls {
        endpoint = endpoint.with_tls(tls);
    }
    Ok(endpoint)
}

/// RabbitMQ's refusal of the connection, as the tool's error; `None` for
/// any other failure.
#[cfg(feature = "amqp")]
pub fn amqp_refusal(e: &consumer_amqp::Error, endpoint: &AmqpEndpoint) -> Option<Error> {
    let reason = match e {
        consumer_amqp::Error::AccessRefused { user, reason, .. } => {
            format!("it refused user `{user}`: {reason}")
        }
        consumer_amqp::Error::Tls { cause, reason, .. } => {
            format!("the TLS handshake failed: {cause} ({reason})")
        }
        consumer_amqp::Error::TlsClosed { reason, .. } => format!(
            "it closed the connection during the TLS handshake: it most likely refuses the client certificate ({reason})"
        ),
        consumer_amqp::Error::TlsFile { .. }
        | consumer_amqp::Error::InvalidUri { .. }
        | consumer_amqp::Error::NeedsTls { .. } => return Some(Error::Usage(e.to_string())),
        _ => return None,
    };
    Some(Error::ConnectionRefused {
        service: "RabbitMQ",
        address: endpoint.redacted_uri(),
        reason,
        hint: "--amqp-ca, --amqp-cert/--amqp-key, --amqp-user with --amqp-password-file or AMQP_PASSWORD",
    })
}

/// The Kafka security settings of the flags; `None` for a plain link.
#[cfg(feature = "kafka")]
pub fn kafka_security(services: &Services) -> Result<Option<KafkaSecurity>> {
    let s = &services.security;
    let sasl = match &s.kafka_user {
        Some(user) => {
            let pw = password(s.kafka_password_file.as_deref(), &["KAFKA_PASSWORD"])?
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "--kafka-user {user} needs a password: --kafka-password-file or KAFKA_PASSWORD"
                    ))
                })?;
            Some(match s.kafka_sasl_mechanism {
                Some(KafkaMechanismArg::Plain) => KafkaSasl::plain(user.clone(), pw),
                Some(KafkaMechanismArg::ScramSha256) => KafkaSasl::scram_sha_256(user.clone(), pw),
                Some(KafkaMechanismArg::ScramSha512) => KafkaSasl::scram_sha_512(user.clone(), pw),
                None => {
                    return Err(Error::Usage(
                        "--kafka-user needs --kafka-sasl-mechanism (plain, scram-sha-256 or scram-sha-512)".to_owned(),
                    ));
                }
            })
        }
        None => None,
    };
    let certificates = s.kafka_ca.is_some() || s.kafka_cert.is_some();
    let protocol = s
        .kafka_security_protocol
        .unwrap_or(match (&sasl, certificates) {
            (Some(_), _) => KafkaProtocolArg::SaslSsl,
            (None, true) => KafkaProtocolArg::Ssl,
            (None, false) => KafkaProtocolArg::Plaintext,
        });
    let security = match (protocol, sasl) {
        (KafkaProtocolArg::Plaintext, None) if !certificates => return Ok(None),
        (KafkaProtocolArg::Ssl, None) => KafkaSecurity::ssl(),
        (KafkaProtocolArg::SaslSsl, Some(sasl)) => KafkaSecurity::sasl_ssl(sasl),
        (KafkaProtocolArg::SaslPlaintext, Some(sasl)) => KafkaSecurity::sasl_plaintext(sasl),
        (protocol, sasl) => {
            use clap::ValueEnum as _;
            let name = protocol
                .to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_owned());
            return Err(Error::Usage(format!(
                "--kafka-security-protocol {name} does not go with {}: SASL protocols need --kafka-user, the others refuse it, and certificates need TLS",
                if sasl.is_some() {
                    "--kafka-user"
                } else {
                    "these flags"
                }
            )));
        }
    };
    needs_tls_build("--kafka-security-protocol")?;
    let security = match &s.kafka_ca {
        Some(ca) => security.with_ca_file(ca),
        None => security,
    };
    Ok(Some(match (&s.kafka_cert, &s.kafka_key) {
        (Some(cert), Some(key)) => security.with_client_certificate(cert, key),
        _ => security,
    }))
}

/// Kafka's refusal of this client's settings, as the tool's error;
/// `None` for any other failure.
#[cfg(feature = "kafka")]
pub fn kafka_refusal(e: &consumer_kafka::Error, brokers: &str) -> Option<Error> {
    let reason = match e {
        consumer_kafka::Error::Refused { cause, reason, .. } => {
            format!("{cause} (librdkafka: {reason})")
        }
        consumer_kafka::Error::NeedsTls { .. } => return Some(Error::Usage(e.to_string())),
        _ => return None,
    };
    Some(Error::ConnectionRefused {
        service: "Kafka",
        address: brokers.to_owned(),
        reason,
        hint: "--kafka-ca, --kafka-cert/--kafka-key, --kafka-user with --kafka-password-file or KAFKA_PASSWORD",
    })
}

#[cfg(all(test, feature = "kafka", feature = "amqp", feature = "tls"))]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::Cli;

    fn services(flags: &[&str]) -> Services {
        let mut args = vec!["consumer"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["dedup", "counts"]);
        Cli::try_parse_from(args).expect("valid flags").services
    }

    fn password_file(name: &str) -> String {
        let path = std::env::temp_dir().join(format!("consumer-cli-{name}-{}", std::process::id()));
        std::fs::write(&path, "s3cret-from-file\n").expect("a temporary file");
        path.display().to_string()
    }

    #[test]
    fn the_kafka_flags_choose_the_protocol_and_take_the_password_from_its_file() {
        let file = password_file("kafka");
        let s = services(&[
            "--kafka-user",
            "billing",
            "--kafka-password-file",
            &file,
            "--kafka-sasl-mechanism",
            "scram-sha-512",
            "--kafka-ca",
            "/etc/ca.pem",
        ]);
        let security = kafka_security(&s).expect("valid").expect("secured");
        assert_eq!(security.protocol(), "SASL_SSL");
        assert_eq!(
            security.sasl().map(KafkaSasl::mechanism),
            Some("SCRAM-SHA-512")
        );
        assert!(!format!("{security:?} {s:?}").contains("s3cret"));

        let tls_only = kafka_security(&services(&["--kafka-ca", "/etc/ca.pem"]))
            .expect("valid")
            .expect("secured");
        assert_eq!(tls_only.protocol(), "SSL");
        assert!(kafka_security(&services(&[])).expect("valid").is_none());

        let e = kafka_security(&services(&[
            "--kafka-security-protocol",
            "plaintext",
            "--kafka-user",
            "billing",
            "--kafka-password-file",
            &file,
            "--kafka-sasl-mechanism",
            "plain",
        ]))
        .expect_err("plaintext with a user");
        assert!(
            e.to_string()
                .contains("--kafka-security-protocol plaintext"),
            "{e}"
        );
        let _ = std::fs::remove_file(file);
    }

    #[test]
    fn the_amqp_flags_make_an_endpoint_without_the_password_in_its_debug() {
        let file = password_file("amqp");
        let s = services(&[
            "--amqp-url",
            "amqps://127.0.0.1:5671/%2f",
            "--amqp-user",
            "billing",
            "--amqp-password-file",
            &file,
            "--amqp-ca",
            "/etc/ca.pem",
        ]);
        let endpoint = amqp_endpoint(&s).expect("valid");
        assert_eq!(endpoint.server(), Some(("127.0.0.1", 5671)));
        assert!(!format!("{endpoint:?}").contains("s3cret"));
        let _ = std::fs::remove_file(file);
    }
}
