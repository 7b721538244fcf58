//! [`SagaMonitor`]: the gauges read from the store rather than counted in
//! a process: how many sagas are active, how old the oldest one is, how
//! many wait for an operator after a failed compensation. A process
//! restart or a second instance cannot skew them, and a saga stuck with no
//! event arriving still shows.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter};

use super::SagaDatabase;
use super::database::OpenSagas;
use super::statements;
use consumer_core::error::Error;
use consumer_core::metrics::attr::DB_SYSTEM;
use consumer_core::metrics::catalogue::MetricSpec;

use crate::metrics::{
    SAGA_ACTIVE, SAGA_COMPENSATION_FAILED, SAGA_OLDEST_ACTIVE_AGE, attr::SAGA_TYPE,
};

type Readings = Arc<Mutex<BTreeMap<String, OpenSagas>>>;

/// Reads the open sagas every interval (default 15 s) for the gauges
/// `consumer.saga.active`, `consumer.saga.oldest_active.age` and
/// `consumer.saga.compensation_failed`, whose alerts are in
/// `ops/prometheus/alerts.yml`. Run one per store, in the service:
/// `service.task("saga-monitor", move |stop| monitor.run_until(stop.stopped()))`.
pub struct SagaMonitor<DB: sqlx::Database> {
    pool: sqlx::Pool<DB>,
    every: Duration,
    meter: Option<Meter>,
}

impl<DB: sqlx::Database> std::fmt::Debug for SagaMonitor<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SagaMonitor")
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl<DB: SagaDatabase> SagaMonitor<DB> {
    /// A monitor of the sagas on `pool`, every 15 s.
    pub fn new(pool: sqlx::Pool<DB>) -> Self {
        Self {
            pool,
            every: Duration::from_secs(15),
            meter: None,
        }
    }

    /// How often it reads (at least 100 ms).
    #[must_use]
    pub fn with_interval(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(100));
        self
    }

    /// Where its gauges come from (default: the global meter provider's,
    /// as installed when it starts).
    #[must_use]
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Reads once; a saga type seen before and without open sagas now reads
    /// zero.
    async fn read(&self, readings: &Readings) -> Result<(), Error> {
        let open = statements::open(&self.pool).await?;
        let mut held = readings.lock().unwrap_or_else(PoisonError::into_inner);
        for r in held.values_mut() {
            r.active = 0;
            r.compensation_failed = 0;
            r.oldest_active_ms = None;
        }
        for o in open {
            held.insert(o.saga_type.clone(), o);
        }
        Ok(())
    }

    /// Reads until `stop` completes. A read that fails is logged and tried
    /// again at the next interval (the gauges keep their last readings).
    pub async fn run_until<F: std::future::Future<Output = ()> + Send>(
        self,
        stop: F,
    ) -> Result<(), Error> {
        let meter = self
            .meter
            .clone()
            .unwrap_or_else(consumer_core::metrics::global_meter);
        let readings: Readings = Arc::default();
        let _gauges = gauges::<DB>(&meter, &readings);
        tokio::pin!(stop);
        loop {
            if let Err(e) = self.read(&readings).await {
                tracing::warn!(target: "consumer::saga", error = %e, "could not read the open sagas for their gauges");
            }
            tokio::select! {
                () = &mut stop => return Ok(()),
                () = tokio::time::sleep(self.every) => {}
            }
        }
    }
}

/// The three gauges, observing `readings`; they stop with the monitor.
fn gauges<DB: SagaDatabase>(
    meter: &Meter,
    readings: &Readings,
) -> Vec<Box<dyn std::any::Any + Send + Sync>> {
    let gauge = |spec: &MetricSpec, read: fn(&OpenSagas) -> f64| {
        let weak = Arc::downgrade(readings);
        meter
            .f64_observable_gauge(spec.name)
            .with_unit(spec.unit)
            .with_description(spec.description)
            .with_callback(move |out: &dyn AsyncInstrument<f64>| {
                let Some(readings) = weak.upgrade() else {
                    return;
                };
                let held = readings.lock().unwrap_or_else(PoisonError::into_inner);
                for (saga_type, r) in held.iter() {
                    out.observe(
                        read(r),
                        &[
                            KeyValue::new(DB_SYSTEM, DB::SYSTEM),
                            KeyValue::new(SAGA_TYPE, saga_type.clone()),
                        ],
                    );
                }
            })
            .build()
    };
    vec![
        Box::new(gauge(&SAGA_ACTIVE, |r| r.active as f64)),
        Box::new(gauge(&SAGA_COMPENSATION_FAILED, |r| {
            r.compensation_failed as f64
        })),
        Box::new(gauge(&SAGA_OLDEST_ACTIVE_AGE, |r| {
            r.oldest_active_ms.map_or(0.0, |at| {
                let age_ms = consumer_core::store::now_ms().saturating_sub(at).max(0);
                Duration::from_millis(age_ms.cast_unsigned()).as_secs_f64()
            })
        })),
    ]
}
