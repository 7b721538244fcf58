//! The check a secured client makes before its `connect` returns: one
//! metadata request on a short-lived client with the same brokers and
//! security settings. librdkafka retries a refused handshake or password
//! in the background for ever, logging it; this turns the first refusal
//! into [`Error::Refused`], a sentence naming Kafka and the cause, so a
//! wrong certificate, an unknown CA or a bad password fails at start.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};

use crate::error::Error;
use crate::security::KafkaSecurity;

/// How long the check waits for an answer when the brokers take
/// connections but neither answer nor refuse.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Properties the check's client copies from the real client's: how it
/// finds and reaches the brokers.
const LINK_PREFIXES: &[&str] = &[
    "bootstrap.servers",
    "security.",
    "ssl.",
    "ssl_",
    "sasl.",
    "enable.ssl.",
    "enable.sasl.",
    "broker.address.",
    "client.dns.",
    "socket.",
    "https.",
];

/// What every client of this crate does before it is created: refuses a
/// security setting this build of librdkafka cannot honour, and checks a
/// secured link ([`check`]). `own` are the caller's properties, which
/// override `security`'s. Returns `security`'s properties, for the client.
pub(crate) async fn before_connect(
    brokers: &str,
    security: Option<&KafkaSecurity>,
    own: &[(String, String)],
) -> Result<Vec<(String, String)>, Error> {
    let secured = security.map(KafkaSecurity::properties).unwrap_or_default();
    let link: Vec<(String, String)> =
        std::iter::once(("bootstrap.servers".to_owned(), brokers.to_owned()))
            .chain(secured.iter().cloned())
            .chain(own.iter().cloned())
            .collect();
    if let Some(setting) = crate::security::needs_tls(&link) {
        return Err(Error::NeedsTls { setting });
    }
    if applies(&link) {
        check(link, brokers).await?;
    }
    Ok(secured)
}

/// Whether a client with these properties is secured (a security protocol
/// other than `PLAINTEXT`), and so checked at start.
fn applies(properties: &[(String, String)]) -> bool {
    properties
        .iter()
        .rev()
        .find(|(k, _)| k == "security.protocol")
        .is_some_and(|(_, v)| !v.eq_ignore_ascii_case("plaintext"))
}

/// Connects with `properties` (the client's own, in the order they are
/// set) and asks for the cluster's metadata. `Ok` once the brokers answer,
/// and also when none can be reached (librdkafka goes on trying in the
/// background, as for any client) or none answers within 10 s; an
/// [`Error::Refused`] when a broker refused the TLS handshake or the SASL
/// credentials.
async fn check(properties: Vec<(String, String)>, brokers: &str) -> Result<(), Error> {
    let brokers = brokers.to_owned();
    tokio::task::spawn_blocking(move || run(&properties, &brokers))
        .await
        .map_err(|_| Error::PollThread("of the start check ended without an answer"))?
}

fn run(properties: &[(String, String)], brokers: &str) -> Result<(), Error> {
    let mut config = ClientConfig::new();
    for (k, v) in properties {
        if LINK_PREFIXES.iter().any(|p| k.starts_with(p)) {
            config.set(k, v);
        }
    }
    config.set_log_level(crate::tracing_context::log_level());
    let probe: BaseProducer<CheckContext> = config
        .create_with_context(CheckContext::default())
        .map_err(|source| Error::Config {
            context: "creating the start check's client",
            source: crate::security::redact_error(source),
        })?;
    let deadline = Instant::now() + CHECK_TIMEOUT;
    loop {
        let answered = probe
            .client()
            .fetch_metadata(None, Duration::from_millis(500))
            .is_ok();
        // Hands every event librdkafka queued meanwhile (its log lines
        // too, one event each) to the context: a poll takes one event at a
        // time until its deadline.
        probe.poll(Duration::from_millis(100));
        if let Some((code, reason)) = probe.context().refusal() {
            return Err(refused(brokers, code, reason));
        }
        if answered {
            return Ok(());
        }
        if probe.context().all_brokers_down() || Instant::now() >= deadline {
            tracing::warn!(target: "consumer::kafka", brokers, "no Kafka broker answered the start check; librdkafka keeps trying in the background");
            return Ok(());
        }
    }
}

/// A refusal librdkafka reported, as the error that names its cause.
fn refused(brokers: &str, code: RDKafkaErrorCode, reason: String) -> Error {
    let lower = reason.to_ascii_lowercase();
    let cause = match code {
        RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed => {
            "the broker refused the SASL credentials: a wrong user name or password, or a mechanism its listener does not enable"
        }
        _ if lower.contains("certificate verify failed") => {
            "the TLS handshake failed: the broker's certificate is not signed by a CA this client trusts, or does not name the host connected to (KafkaSecurity::with_ca_file sets the CA)"
        }
        _ if lower.contains("bad certificate")
            || lower.contains("unknown ca")
            || lower.contains("certificate required")
            || lower.contains("certificate unknown") =>
        {
            "the TLS handshake failed: the broker refused this client's certificate (not signed by a CA the broker trusts, or none was sent where the listener requires one)"
        }
        _ if lower.contains("security.protocol") || lower.contains("plaintext broker listener") => {
            "the broker's listener does not speak this client's security.protocol (a TLS listener reached without TLS, or a plain one with it)"
        }
        _ => "the TLS handshake failed",
    };
    Error::Refused {
        brokers: brokers.to_owned(),
        cause,
        reason,
        code,
    }
}

/// The check's client context: keeps the first refusal librdkafka reports.
#[derive(Default)]
struct CheckContext {
    refusal: Mutex<Option<(RDKafkaErrorCode, String)>>,
    all_down: Mutex<bool>,
}

impl CheckContext {
    fn refusal(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.refusal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn all_brokers_down(&self) -> bool {
        *self
            .all_down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether an error librdkafka reports is a refusal of this client's
/// security settings, as opposed to a broker that is down or slow.
fn is_refusal(code: RDKafkaErrorCode, reason: &str) -> bool {
    match code {
        RDKafkaErrorCode::Authentication
        | RDKafkaErrorCode::SaslAuthenticationFailed
        | RDKafkaErrorCode::SSL => true,
        // A client certificate refused by the broker, or a TLS listener
        // reached without TLS, shows as a transport error; the reason
        // starts with the broker's name (`sasl_ssl://host:port/...`), so
        // OpenSSL's own words are looked for, not "ssl".
        RDKafkaErrorCode::BrokerTransportFailure => {
            let lower = reason.to_ascii_lowercase();
            ["ssl routines", "ssl handshake", "security.protocol"]
                .iter()
                .any(|w| lower.contains(w))
        }
        _ => false,
    }
}

impl ClientContext for CheckContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        crate::tracing_context::log("start check", level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let Some(code) = error.rdkafka_error_code() else {
            return;
        };
        if code == RDKafkaErrorCode::AllBrokersDown {
            *self
                .all_down
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        } else if is_refusal(code, reason) {
            self.refusal
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get_or_insert_with(|| (code, reason.to_owned()));
        }
    }
}

impl ProducerContext for CheckContext {
    type DeliveryOpaque = ();

    // The check produces nothing.
    fn delivery(&self, _: &DeliveryResult<'_>, (): ()) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn only_secured_clients_are_checked_and_the_last_setting_wins() {
        assert!(!applies(&props(&[("bootstrap.servers", "k:9092")])));
        assert!(applies(&props(&[("security.protocol", "SASL_SSL")])));
        assert!(!applies(&props(&[
            ("security.protocol", "SSL"),
            ("security.protocol", "plaintext")
        ])));
    }

    #[test]
    fn each_refusal_is_told_by_its_cause() {
        let cases = [
            (
                RDKafkaErrorCode::Authentication,
                "SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
                "refused the SASL credentials",
            ),
            (
                RDKafkaErrorCode::SSL,
                "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified",
                "not signed by a CA this client trusts",
            ),
            (
                RDKafkaErrorCode::BrokerTransportFailure,
                "Receive failed: error:0A000412:SSL routines::ssl/tls alert bad certificate: SSL alert number 42",
                "refused this client's certificate",
            ),
        ];
        for (code, reason, cause) in cases {
            assert!(is_refusal(code, reason), "{reason}");
            let e = refused("k:9094", code, reason.to_owned());
            let message = e.to_string();
            assert!(message.starts_with("Kafka at k:9094 refused"), "{message}");
            assert!(message.contains(cause), "{message}");
            assert!(!e.is_retriable(), "{message}");
        }
        assert!(!is_refusal(
            RDKafkaErrorCode::BrokerTransportFailure,
            "sasl_ssl://127.0.0.1:9094/bootstrap: Connect to ipv4#127.0.0.1:9094 failed: Connection refused (after 0ms in state CONNECT)"
        ));
    }
}
