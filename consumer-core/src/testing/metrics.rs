//! [`MetricsRecorder`]: a meter provider whose metrics a test reads back,
//! and the check that what was emitted is what the catalogue documents.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    InstrumentKind, ManualReader, Pipeline, SdkMeterProvider, Temporality,
};

use crate::metrics::{CATALOGUE, Instrument};

/// A meter provider of its own (not the global one, so tests in parallel
/// do not see each other's metrics), read on demand.
#[derive(Debug, Clone)]
pub struct MetricsRecorder {
    provider: SdkMeterProvider,
    reader: Arc<ManualReader>,
}

#[derive(Debug)]
struct SharedReader(Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// One data point as collected: a sum's or gauge's value, a histogram's
/// count and sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Metric name.
    pub name: String,
    /// Its unit.
    pub unit: String,
    /// The instrument kind, as the data says.
    pub instrument: Instrument,
    /// Attributes, by key.
    pub attributes: BTreeMap<String, String>,
    /// Sum or gauge value; histogram count.
    pub value: f64,
    /// Histogram sum (0 otherwise).
    pub sum: f64,
    /// Histogram bucket boundaries (empty otherwise).
    pub bounds: Vec<f64>,
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?} = {}", self.name, self.attributes, self.value)
    }
}

impl Default for MetricsRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl MetricsRecorder {
    /// A provider with a manual reader (cumulative).
    pub fn new() -> Self {
        let reader = Arc::new(ManualReader::builder().build());
        let provider = SdkMeterProvider::builder()
            .with_reader(SharedReader(Arc::clone(&reader)))
            .build();
        Self { provider, reader }
    }

    /// The meter to give consumers and relays (`with_meter`).
    pub fn meter(&self) -> Meter {
        self.provider.meter_with_scope(crate::metrics::scope())
    }

    /// Every data point now.
    pub fn collect(&self) -> Vec<Point> {
        let mut rm = ResourceMetrics::default();
        if let Err(e) = self.reader.collect(&mut rm) {
            panic!("collecting metrics failed: {e}");
        }
        let mut points = Vec::new();
        for scope in rm.scope_metrics() {
            for metric in scope.metrics() {
                let mut push = |instrument,
                                attrs: &mut dyn Iterator<Item = &opentelemetry::KeyValue>,
                                value: f64,
                                sum: f64,
                                bounds: Vec<f64>| {
                    points.push(Point {
                        name: metric.name().to_owned(),
                        unit: metric.unit().to_owned(),
                        instrument,
                        attributes: attrs
                            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                            .collect(),
                        value,
                        sum,
                        bounds,
                    });
                };
                macro_rules! each {
                    ($data:expr, $conv:expr) => {
                        match $data {
                            MetricData::Sum(s) => {
                                let kind = if s.is_monotonic() {
                                    Instrument::Counter
                                } else {
                                    Instrument::UpDownCounter
                                };
                                for p in s.data_points() {
                                    push(kind, &mut p.attributes(), $conv(p.value()), 0.0, vec![]);
                                }
                            }
                            MetricData::Gauge(g) => {
                                for p in g.data_points() {
                                    push(
                                        Instrument::Gauge,
                                        &mut p.attributes(),
                                        $conv(p.value()),
                                        0.0,
                                        vec![],
                                    );
                                }
                            }
                            MetricData::Histogram(h) => {
                                for p in h.data_points() {
                                    push(
                                        Instrument::Histogram,
                                        &mut p.attributes(),
                                        p.count() as f64,
                                        $conv(p.sum()),
                                        p.bounds().collect(),
                                    );
                                }
                            }
                            MetricData::ExponentialHistogram(_) => {}
                        }
                    };
                }
                match metric.data() {
                    AggregatedMetrics::F64(d) => each!(d, |v: f64| v),
                    AggregatedMetrics::U64(d) => each!(d, |v: u64| v as f64),
                    AggregatedMetrics::I64(d) => each!(d, |v: i64| v as f64),
                }
            }
        }
        points
    }
}

/// The sum of the values of `name`'s points whose attributes include
/// every pair of `with`.
pub fn total(points: &[Point], name: &str, with: &[(&str, &str)]) -> f64 {
    points
        .iter()
        .filter(|p| p.name == name)
        .filter(|p| {
            with.iter()
                .all(|(k, v)| p.attributes.get(*k).is_some_and(|a| a == v))
        })
        .map(|p| p.value)
        .sum()
}

/// Checks every point against the catalogue: a documented name, its unit
/// and instrument, its buckets, and only documented attribute keys.
pub fn check_against_catalogue(points: &[Point]) -> Result<(), String> {
    check_against_catalogues(points, &[CATALOGUE])
}

/// [`check_against_catalogue`] against the runtime's catalogue and those
/// of the parts built on it (the sagas' `consumer::saga::metrics::CATALOGUE`).
pub fn check_against_catalogues(
    points: &[Point],
    catalogues: &[&[crate::metrics::MetricSpec]],
) -> Result<(), String> {
    let mut problems = Vec::new();
    for p in points {
        let Some(spec) = catalogues
            .iter()
            .flat_map(|c| c.iter())
            .find(|s| s.name == p.name)
        else {
            problems.push(format!("{p}: not in the catalogue"));
            continue;
        };
        if spec.unit != p.unit {
            problems.push(format!("{p}: unit {:?}, catalogue {:?}", p.unit, spec.unit));
        }
        if spec.instrument != p.instrument {
            problems.push(format!(
                "{p}: a {}, catalogue a {}",
                p.instrument, spec.instrument
            ));
        }
        if spec.instrument == Instrument::Histogram && p.bounds != spec.boundaries {
            problems.push(format!("{p}: buckets {:?}", p.bounds));
        }
        for key in p.attributes.keys() {
            if !spec.attributes.contains(&key.as_str()) {
                problems.push(format!("{p}: attribute {key} is not documented"));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}
