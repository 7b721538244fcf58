//! [`TracingContext`]: the producers' librdkafka context, and how every
//! client of this crate turns librdkafka's log lines into `tracing` events.

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

/// The context of the producers this crate creates ([`KafkaPublisher`]'s
/// and the settle producer of a [`KafkaSource`]): librdkafka's log lines
/// and client errors (a broker connection lost, a request timed out) become
/// `tracing` events under `consumer::kafka::librdkafka` and
/// `consumer::kafka`, instead of going to the `log` crate, where an
/// application on `tracing` would never see them.
///
/// [`KafkaPublisher`]: crate::KafkaPublisher
/// [`KafkaSource`]: crate::KafkaSource
/// Each event carries a `client` field saying whose it is (`publisher`, or
/// `settle producer`), since librdkafka's own words do not.
#[derive(Debug, Clone, Copy)]
pub struct TracingContext {
    client: &'static str,
}

impl TracingContext {
    pub(crate) const fn new(client: &'static str) -> Self {
        Self { client }
    }
}

impl ClientContext for TracingContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log(self.client, level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "consumer::kafka", client = self.client, %error, reason, "producer error (librdkafka retries by itself)");
    }
}

/// The level librdkafka logs at: the `tracing` subscriber's most verbose
/// one, as installed now (`INFO` and `DEBUG` give librdkafka's info, where
/// its lost connections and timed-out requests are). Without this,
/// `rdkafka` reads the `log` crate's level, which an application on
/// `tracing` leaves off, and only errors would come through.
pub(crate) fn log_level() -> RDKafkaLogLevel {
    use tracing::level_filters::LevelFilter;
    let current = LevelFilter::current();
    if current >= LevelFilter::INFO {
        RDKafkaLogLevel::Info
    } else if current >= LevelFilter::WARN {
        RDKafkaLogLevel::Warning
    } else {
        RDKafkaLogLevel::Error
    }
}

/// One librdkafka log line of `client` as a `tracing` event of its level.
pub(crate) fn log(client: &'static str, level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(target: "consumer::kafka::librdkafka", client, facility = fac, "{message}");
        }
        RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "consumer::kafka::librdkafka", client, facility = fac, "{message}");
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "consumer::kafka::librdkafka", client, facility = fac, "{message}");
        }
        RDKafkaLogLevel::Debug => {
            tracing::debug!(target: "consumer::kafka::librdkafka", client, facility = fac, "{message}");
        }
    }
}
