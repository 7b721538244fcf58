//! [`PrometheusMetrics`]: the metrics of a whole process, served by the
//! service host as `GET /metrics` in Prometheus' text format (feature
//! `prometheus`).
//!
//! The exporter is `opentelemetry-prometheus` on an SDK meter provider:
//! Prometheus pulls, so nothing runs between scrapes and no collector is
//! needed, and the standard's alerts are PromQL. A team that ships to an
//! OpenTelemetry collector instead installs its own provider with the
//! OTLP exporter (what the OpenTelemetry project recommends); the
//! instruments are the same, since the library only uses the API.
//!
//! Names follow the exporter's translation of the OpenTelemetry names:
//! dots become underscores, `s` adds `_seconds`, counters end in
//! `_total` (`consumer.dead_letters` is `consumer_dead_letters_total`,
//! `messaging.process.duration` is `messaging_process_duration_seconds`).

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder as _, TextEncoder};

use crate::error::Error;

/// A meter provider whose metrics a Prometheus scrape reads.
#[derive(Debug, Clone)]
pub struct PrometheusMetrics {
    registry: prometheus::Registry,
    provider: SdkMeterProvider,
}

impl PrometheusMetrics {
    /// A provider for the service `service_name` (the `service_name` label
    /// of `target_info`), not installed anywhere: give
    /// [`PrometheusMetrics::meter`] to consumers and relays
    /// (`with_meter`), or call [`PrometheusMetrics::install`].
    pub fn new(service_name: &str) -> Result<Self, Error> {
        let registry = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .map_err(|e| Error::Config(format!("the Prometheus exporter cannot start: {e}")))?;
        let provider = SdkMeterProvider::builder()
            .with_reader(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(service_name.to_owned())
                    .build(),
            )
            .build();
        Ok(Self { registry, provider })
    }

    /// Makes this the global meter provider, which every consumer and relay
    /// started afterwards records to (unless given a meter of its own).
    #[must_use]
    pub fn install(self) -> Self {
        opentelemetry::global::set_meter_provider(self.provider.clone());
        self
    }

    /// The meter the framework's instruments use, from this provider.
    pub fn meter(&self) -> Meter {
        self.provider.meter_with_scope(crate::metrics::scope())
    }

    /// The provider, for the application's own instruments.
    pub fn provider(&self) -> &SdkMeterProvider {
        &self.provider
    }

    /// Every metric now, in Prometheus' text exposition format.
    pub fn scrape(&self) -> Result<String, Error> {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .map_err(|e| Error::Config(format!("the metrics cannot be encoded: {e}")))?;
        String::from_utf8(out).map_err(|e| Error::Config(format!("the metrics are not UTF-8: {e}")))
    }
}
