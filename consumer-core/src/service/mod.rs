//! A host for a whole service: consumers (or routers) over different
//! sources and the outbox relays, in one process, under one stop signal,
//! drained together, with one health state.
//!
//! ```no_run
//! # async fn demo<C1, C2>(orders: C1, billing: C2) {}
//! use consumer_core::Service;
//! # async fn run(
//! #     orders: consumer_core::Consumer<consumer_core::memory::MemorySource, consumer_core::MemoryStore, consumer_core::router::OneHandler<Noop>>,
//! # ) -> Result<(), consumer_core::Error> {
//! Service::new("orders-service")
//!     .consumer("orders", orders)
//!     .with_health_endpoint("0.0.0.0:8080".parse().expect("an address"))?
//!     .run()                   // until SIGTERM or SIGINT
//!     .await
//! # }
//! # struct Noop;
//! # impl consumer_core::Handler<consumer_core::MemoryStore> for Noop {
//! #     fn name(&self) -> &'static str { "noop" }
//! #     fn retry_policy(&self) -> consumer_core::RetryPolicy { consumer_core::RetryPolicy::none() }
//! #     async fn handle(&self, _: &mut consumer_core::handler::Invocation<'_, consumer_core::MemoryStore>) -> consumer_core::handler::Outcome { consumer_core::handler::Outcome::Processed }
//! # }
//! ```
//!
//! * **Stop.** On the signal, every part is told to stop at once: consumers
//!   take no new deliveries, finish running attempts and release the rest
//!   (the broker redelivers them); relays finish the round in progress and
//!   start no new one (what is left stays in the table). The parts get
//!   [`Service::with_shutdown_timeout`] (60 s) in all; past it they are
//!   abandoned, which loses nothing either (unsettled deliveries come back,
//!   an interrupted relay round rolls back).
//! * **Failure.** A part that ends with an error stops the service: the
//!   others drain as above, and [`Service::run_until`] returns that error.
//!   A part that ends without one (a source that closed) leaves the others
//!   running.
//! * **Health.** [`Service::health`] says whether the service is live and
//!   ready; [`Service::with_health_endpoint`] serves it as `GET /livez` and
//!   `GET /readyz`.
//! * **Metrics.** With the `prometheus` feature, [`Service::with_metrics`]
//!   serves the process's metrics as `GET /metrics` on the same endpoint
//!   (see [`crate::metrics`] for what is there).

mod admin;
mod endpoint;
mod health;
#[cfg(feature = "prometheus")]
mod prometheus;
mod signal;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

pub use health::{Health, PartHealth, PartState};
#[cfg(feature = "prometheus")]
pub use prometheus::PrometheusMetrics;
pub use signal::shutdown_signal;

use crate::error::Error;
use crate::outbox::{OutboxDatabase, OutboxRelay};
use crate::publish::Publisher;
use crate::router::Routes;
use crate::runtime::Consumer;
use crate::source::Source;
use crate::store::DedupStore;
use health::Part;

/// Resolves once the service stops: what each part runs until.
#[derive(Debug, Clone)]
pub struct StopSignal(watch::Receiver<bool>);

impl StopSignal {
    /// Waits for the stop.
    pub async fn stopped(mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

/// How a part's task ended.
type Ended = (Arc<Part>, Result<(), Error>);

type Runner =
    Box<dyn FnOnce(StopSignal) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send>> + Send>;

/// The parts of a service and how they stop; see the module docs.
pub struct Service {
    name: &'static str,
    parts: Vec<(Arc<Part>, Runner)>,
    shutdown_timeout: Duration,
    endpoint: Option<std::net::TcpListener>,
    metrics: Option<endpoint::Scrape>,
    stopping: Arc<AtomicBool>,
    version: &'static str,
    described: Vec<crate::describe::PartDescription>,
    documents: Vec<(&'static str, Arc<String>)>,
    admin: Option<admin::Admin>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("name", &self.name)
            .field(
                "parts",
                &self.parts.iter().map(|(p, _)| &p.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Service {
    /// A service with no parts yet.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            parts: Vec::new(),
            shutdown_timeout: Duration::from_secs(60),
            endpoint: None,
            metrics: None,
            stopping: Arc::new(AtomicBool::new(false)),
            version: "0.0.0",
            described: Vec::new(),
            documents: Vec::new(),
            admin: None,
        }
    }

    fn part(
        mut self,
        name: String,
        kind: &'static str,
        stats: Option<Arc<crate::Stats>>,
        run: Runner,
    ) -> Self {
        self.parts
            .push((Arc::new(Part::new(name, kind, stats)), run));
        self
    }

    /// Adds a consumer (of one handler or of a router).
    #[must_use]
    pub fn consumer<Src, S, R>(
        mut self,
        name: impl Into<String>,
        consumer: Consumer<Src, S, R>,
    ) -> Self
    where
        Src: Source,
        S: DedupStore,
        R: Routes<S>,
    {
        let stats = consumer.stats();
        let name = name.into();
        self.described.push(consumer.describe(name.clone()));
        self.part(
            name,
            "consumer",
            Some(stats),
            Box::new(move |stop: StopSignal| Box::pin(consumer.run_until(stop.stopped()))),
        )
    }

    /// Adds an outbox relay.
    #[must_use]
    pub fn relay<DB, P>(mut self, name: impl Into<String>, relay: OutboxRelay<DB, P>) -> Self
    where
        DB: OutboxDatabase,
        P: Publisher,
        OutboxRelay<DB, P>: Send + 'static,
    {
        let name = name.into();
        self.described.push(relay.describe(name.clone()));
        self.part(
            name,
            "relay",
            None,
            Box::new(move |stop: StopSignal| Box::pin(relay.run_until(stop.stopped()))),
        )
    }

    /// Adds any other part: `run` gets the stop signal and returns when it
    /// has stopped.
    #[must_use]
    pub fn task<F, Fut>(self, name: impl Into<String>, run: F) -> Self
    where
        F: FnOnce(StopSignal) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), Error>> + Send + 'static,
    {
        self.part(
            name.into(),
            "task",
            None,
            Box::new(move |stop: StopSignal| Box::pin(run(stop))),
        )
    }

    /// The service's version, for its AsyncAPI document's `info.version`
    /// (default `0.0.0`): `env!("CARGO_PKG_VERSION")`, a release tag.
    #[must_use]
    pub fn with_version(mut self, version: &'static str) -> Self {
        self.version = version;
        self
    }

    /// What the parts added so far read and write: the channels of each
    /// source and relay, each handler's event types and payload type, the
    /// events each outbox declares. The contract tooling reads it: the
    /// AsyncAPI document and the payload-schema snapshots
    /// (`consumer::contracts`, feature `asyncapi`).
    pub fn description(&self) -> crate::describe::ServiceDescription {
        crate::describe::ServiceDescription {
            name: self.name,
            version: self.version,
            parts: self.described.clone(),
        }
    }

    /// Serves `json` as `GET {path}` (`application/json`) on the health
    /// endpoint: what `consumer::contracts` uses to serve the service's
    /// AsyncAPI document at `/asyncapi.json`.
    #[must_use]
    pub fn with_json_document(mut self, path: &'static str, json: String) -> Self {
        self.documents.retain(|(p, _)| *p != path);
        self.documents.push((path, Arc::new(json)));
        self
    }

    /// How long the parts may drain, in all, after the stop (default 60 s).
    #[must_use]
    pub fn with_shutdown_timeout(mut self, t: Duration) -> Self {
        self.shutdown_timeout = t;
        self
    }

    /// Serves [`Service::health`] on `addr` as `GET /livez` and
    /// `GET /readyz` (200, or 503 with each part's state) while the service
    /// runs. Binds now: an address in use is an error here, not at run.
    pub fn with_health_endpoint(mut self, addr: SocketAddr) -> Result<Self, Error> {
        let listener = endpoint::bind(addr).map_err(|e| {
            Error::Config(format!("the health endpoint cannot listen on {addr}: {e}"))
        })?;
        self.endpoint = Some(listener);
        Ok(self)
    }

    /// Serves `metrics` as `GET /metrics` on the health endpoint, in
    /// Prometheus' text format. Install them ([`PrometheusMetrics::install`])
    /// before the service runs, so its consumers and relays record to them.
    #[cfg(feature = "prometheus")]
    #[must_use]
    pub fn with_metrics(mut self, metrics: PrometheusMetrics) -> Self {
        self.metrics = Some(Arc::new(move || {
            metrics.scrape().map_err(|e| e.to_string())
        }));
        self
    }

    /// Serves the admin endpoint on the health endpoint (off unless set):
    /// `POST /admin/pause/{handler}?reason=..&by=..` (`*`: every handler),
    /// `POST /admin/resume/{handler}` and `GET /admin/paused`, on `store`'s
    /// pauses ([`PausedHandlers`](crate::store::paused::PausedHandlers),
    /// the store its consumers read them from). Every request needs
    /// `Authorization: Bearer <token>`; without it, or with another, 401.
    #[must_use]
    pub fn with_admin<S: crate::store::paused::PausedHandlers>(
        mut self,
        token: crate::secret::Secret,
        store: S,
    ) -> Self {
        self.admin = Some(admin::Admin::new(token, store));
        self
    }

    /// Where the health endpoint listens (its port, when `0` was asked).
    pub fn health_endpoint(&self) -> Option<SocketAddr> {
        self.endpoint.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The service's health, for the parts added so far.
    pub fn health(&self) -> Health {
        Health {
            parts: Arc::new(self.parts.iter().map(|(p, _)| Arc::clone(p)).collect()),
            stopping: Arc::clone(&self.stopping),
        }
    }

    /// Runs until SIGTERM or SIGINT, or until a part fails.
    pub async fn run(self) -> Result<(), Error> {
        self.run_until(shutdown_signal()).await
    }

    /// Runs until `signal` completes or a part fails; then stops every
    /// part and waits for them (up to the shutdown timeout). Returns the
    /// first part's error, if one failed.
    pub async fn run_until<F>(self, signal: F) -> Result<(), Error>
    where
        F: Future<Output = ()> + Send,
    {
        let health = self.health();
        let endpoint = match self.endpoint {
            Some(listener) => Some(
                endpoint::serve(
                    listener,
                    endpoint::Served {
                        health: health.clone(),
                        metrics: self.metrics.clone(),
                        documents: self.documents.clone(),
                        admin: self.admin.clone(),
                    },
                )
                .map_err(|e| Error::Config(format!("the health endpoint cannot serve: {e}")))?,
            ),
            None => None,
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        let (mut running, by_task) = spawn_parts(self.parts, &stop_rx);
        tracing::info!(target: "consumer::service", service = self.name, parts = running.len(), "service started");
        let mut first_error = first_failure_before(signal, &mut running, &by_task).await;

        self.stopping.store(true, Ordering::SeqCst);
        for part in health.parts.iter() {
            if part.kind != "consumer" {
                part.drain();
            }
        }
        let _ = stop_tx.send(true);
        tracing::info!(target: "consumer::service", service = self.name, "stopping: draining every part");
        let drain = async {
            while let Some(joined) = running.join_next_with_id().await {
                if let Some(e) = finished(joined, &by_task)
                    && first_error.is_none()
                {
                    first_error = Some(e);
                }
            }
        };
        if tokio::time::timeout(self.shutdown_timeout, drain)
            .await
            .is_err()
        {
            tracing::error!(
                target: "consumer::service",
                service = self.name,
                timeout = ?self.shutdown_timeout,
                "shutdown timeout: abandoning the parts still draining (their unsettled work comes back)"
            );
            running.abort_all();
            while running.join_next().await.is_some() {}
        }
        if let Some(server) = endpoint {
            // Awaited, so the port is closed when this returns.
            server.abort();
            let _ = server.await;
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Which part a task runs.
type PartsByTask = std::collections::HashMap<tokio::task::Id, Arc<Part>>;

/// Starts every part with the stop signal `stop`.
fn spawn_parts(
    parts: Vec<(Arc<Part>, Runner)>,
    stop: &watch::Receiver<bool>,
) -> (JoinSet<Ended>, PartsByTask) {
    let mut running: JoinSet<Ended> = JoinSet::new();
    let mut by_task = PartsByTask::new();
    for (part, run) in parts {
        if part.kind != "consumer" {
            part.set(PartState::Running);
        }
        let stop = StopSignal(stop.clone());
        let task = {
            let part = Arc::clone(&part);
            running.spawn(async move {
                let result = run(stop).await;
                (part, result)
            })
        };
        by_task.insert(task.id(), part);
    }
    (running, by_task)
}

/// Waits for `signal`, or for a part to fail (its error) or for every part
/// to end.
async fn first_failure_before<F: Future<Output = ()>>(
    signal: F,
    running: &mut JoinSet<Ended>,
    by_task: &PartsByTask,
) -> Option<Error> {
    tokio::pin!(signal);
    loop {
        tokio::select! {
            () = &mut signal => return None,
            joined = running.join_next_with_id() => match joined {
                None => return None,
                Some(joined) => {
                    if let Some(e) = finished(joined, by_task) {
                        return Some(e);
                    }
                }
            },
        }
    }
}

/// Records how a part ended; its error, if it failed.
fn finished(
    joined: Result<(tokio::task::Id, Ended), tokio::task::JoinError>,
    by_task: &std::collections::HashMap<tokio::task::Id, Arc<Part>>,
) -> Option<Error> {
    match joined {
        Ok((_, (part, Ok(())))) => {
            part.set(PartState::Stopped);
            tracing::info!(target: "consumer::service", part = %part.name, "part stopped");
            None
        }
        Ok((_, (part, Err(e)))) => {
            tracing::error!(target: "consumer::service", part = %part.name, error = %e, "part failed; stopping the service");
            part.fail(e.to_string());
            Some(e)
        }
        Err(join) => {
            let what = if join.is_panic() {
                "panicked"
            } else {
                "was cancelled"
            };
            let name = by_task.get(&join.id()).map_or("?", |p| p.name.as_str());
            tracing::error!(target: "consumer::service", part = name, "part {what}; stopping the service");
            if let Some(part) = by_task.get(&join.id()) {
                part.fail(what.to_owned());
            }
            Some(Error::Config(format!("service part `{name}` {what}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut out = String::new();
        stream.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn a_failing_part_stops_the_others_and_its_error_is_the_services() {
        let (saw_stop_tx, saw_stop) = tokio::sync::oneshot::channel();
        let service = Service::new("s")
            .task("patient", |stop: StopSignal| async move {
                stop.stopped().await;
                let _ = saw_stop_tx.send(());
                Ok(())
            })
            .task("broken", |_stop| async {
                Err(Error::Config("it broke".into()))
            });
        let health = service.health();
        let err = service
            .run_until(std::future::pending())
            .await
            .expect_err("the broken part's error");
        assert!(err.to_string().contains("it broke"), "{err}");
        saw_stop.await.expect("the other part was told to stop");
        assert!(!health.is_live());
        let states: Vec<_> = health
            .parts()
            .into_iter()
            .map(|p| (p.name, p.state))
            .collect();
        assert_eq!(
            states,
            [
                ("patient".to_owned(), PartState::Stopped),
                ("broken".to_owned(), PartState::Failed)
            ]
        );
    }

    #[tokio::test]
    async fn probes_say_ready_while_running_and_not_ready_while_draining() {
        let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
        let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
        let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
        let service = Service::new("s")
            .task("slow", |signal: StopSignal| async move {
                signal.stopped().await;
                let _ = stopping_tx.send(());
                // Drains until released.
                let _ = release.await;
                Ok(())
            })
            .with_health_endpoint("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
        let addr = service.health_endpoint().expect("listening");
        let run = tokio::spawn(service.run_until(async move {
            let _ = stop.await;
        }));
        // Running: ready.
        let mut ready = get(addr, "/readyz").await;
        for _ in 0..100 {
            if ready.starts_with("HTTP/1.1 200") {
                break;
            }
            tokio::task::yield_now().await;
            ready = get(addr, "/readyz").await;
        }
        assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
        assert!(ready.contains("task slow running"), "{ready}");
        let _ = stop_tx.send(());
        stopping.await.expect("the part got the stop");
        let draining = get(addr, "/readyz").await;
        assert!(draining.starts_with("HTTP/1.1 503"), "{draining}");
        assert!(draining.contains("task slow draining"), "{draining}");
        assert!(get(addr, "/livez").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        let _ = release_tx.send(());
        tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("stops")
            .expect("join")
            .expect("no part failed");
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "the endpoint closes with the service"
        );
    }

    /// Fails every attempt transiently: what is behind it is down.
    struct Down;

    impl crate::Handler<crate::MemoryStore> for Down {
        fn name(&self) -> &'static str {
            "charge"
        }

        fn retry_policy(&self) -> crate::RetryPolicy {
            crate::RetryPolicy::none()
        }

        fn circuit_policy(&self) -> Option<crate::runtime::CircuitPolicy> {
            Some(crate::runtime::CircuitPolicy::new(
                2,
                Duration::from_secs(60),
                Duration::from_secs(60),
            ))
        }

        async fn handle(
            &self,
            _: &mut crate::handler::Invocation<'_, crate::MemoryStore>,
        ) -> crate::handler::Outcome {
            crate::handler::Outcome::Failed(crate::handler::Failure::new(
                crate::handler::FailureKind::Transient,
                "the gateway is down",
            ))
        }
    }

    #[tokio::test]
    async fn readyz_names_a_consumers_open_circuit_and_stays_ready() {
        let broker = crate::MemoryBroker::new(1);
        for i in 0..3 {
            broker
                .publish(
                    "t",
                    crate::Message::raw(&b"{}"[..]).with_id(format!("m-{i}")),
                )
                .await
                .expect("publish");
        }
        let consumer = crate::Consumer::new(broker.source("t"), crate::MemoryStore::new(), Down);
        let stats = consumer.stats();
        let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
        let service = Service::new("s")
            .consumer("payments", consumer)
            .with_health_endpoint("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
        let addr = service.health_endpoint().expect("listening");
        let run = tokio::spawn(service.run_until(async move {
            let _ = stop.await;
        }));
        tokio::time::timeout(
            Duration::from_secs(30),
            stats.wait_for(|s| s.circuits_open == 1),
        )
        .await
        .expect("the circuit opened within 30 s");
        assert_eq!(stats.open_circuits(), ["charge"]);
        let ready = get(addr, "/readyz").await;
        assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
        assert!(
            ready.contains("consumer payments running (circuit open: charge)"),
            "{ready}"
        );
        let _ = stop_tx.send(());
        tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("stops")
            .expect("join")
            .expect("no part failed");
    }

    #[tokio::test]
    async fn a_json_document_is_served_at_its_path_beside_the_probes() {
        // A part that runs until the stop: a service without parts ends at once.
        let service = Service::new("s")
            .task("idle", |stop: StopSignal| async move {
                stop.stopped().await;
                Ok(())
            })
            .with_health_endpoint("127.0.0.1:0".parse().expect("addr"))
            .expect("bind")
            .with_json_document("/doc.json", "{\"a\": 1}".to_owned())
            .with_json_document("/doc.json", "{\"a\": 2}".to_owned());
        let addr = service.health_endpoint().expect("listening");
        let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(service.run_until(async move {
            let _ = stop.await;
        }));
        let answer = get(addr, "/doc.json").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.contains("content-type: application/json"),
            "{answer}"
        );
        assert!(
            answer.ends_with("{\"a\": 2}"),
            "the last one given: {answer}"
        );
        assert!(get(addr, "/livez").await.starts_with("HTTP/1.1 200"));
        let _ = stop_tx.send(());
        run.await.expect("join").expect("no part failed");
    }
}
