//! End to end over OTLP, shared by `tests/kafka_otlp.rs` and
//! `tests/amqp_otlp.rs`: a local OTLP/HTTP receiver (`scripts/otlp_receiver.py`,
//! its python from `scripts/tools otlp-receiver`), the SDK providers that
//! export to it over HTTP with protobuf, the application's subscriber as the
//! observability guide gives it, and the flow: a request span, an outbox event enqueued in
//! its PostgreSQL transaction, the relay, the broker, a handler.
//!
//! The subscriber is the global one, so each test binary runs one test.

#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use consumer::{
    Consumer, NewEvent, Outbox, OutboxRelay, PgStore, PgTx, Publisher, handler, source::Source,
};
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::Value;
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// The env var `scripts/test` sets to the receiver's python.
const SERVICE_NAME: &str = "consumer-otlp-test";
/// How long the receiver may take to show what the test waits for.
const RECEIVE_WITHIN: Duration = Duration::from_secs(20);

/// The receiver's python: `OTLP_RECEIVER_PYTHON`, else the venv
/// `scripts/tools otlp-receiver` makes.
fn receiver_python() -> String {
    crate::tools::Venv {
        env: "OTLP_RECEIVER_PYTHON",
        dir: "venv",
        tool: "otlp-receiver",
        imports: "import opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        needs: "opentelemetry-proto",
    }
    .python()
}

/// `scripts/otlp_receiver.py` as a child process, killed on drop, writing
/// one JSON line per span and per metric data point to a file of its own.
pub struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    pub fn start() -> Self {
        let python = receiver_python();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/otlp_receiver.py");
        let dir = std::env::temp_dir().join("consumer-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let out = dir.join(format!("otlp-{}.jsonl", uuid::Uuid::new_v4().simple()));
        let mut child = Command::new(&python)
            .arg("-u")
            .arg(script)
            .arg("--out")
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {python} {script}: {e}"));
        let mut first = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        let read = BufReader::new(stdout).read_line(&mut first);
        let port = first.trim().parse::<u16>().ok();
        let Some(port) = port else {
            let _ = child.kill();
            let status = child.wait();
            panic!(
                "the OTLP receiver ({python} {script}) printed {first:?} instead of its port ({read:?}, exit {status:?}): see its stderr above"
            );
        };
        Self { child, port, out }
    }

    pub fn endpoint(&self, signal: &str) -> String {
        format!("http://127.0.0.1:{}/v1/{signal}", self.port)
    }

    /// The complete lines received so far.
    fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|l| serde_json::from_str(l).expect("the receiver writes JSON lines"))
            .collect()
    }

    /// Polls the receiver's output until `done` holds for it, and returns
    /// it; fails with `what` and everything received after
    /// [`RECEIVE_WITHIN`].
    pub fn wait_for(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + RECEIVE_WITHIN;
        loop {
            let lines = self.lines();
            if done(&lines) {
                return lines;
            }
            if Instant::now() >= deadline {
                let all: Vec<String> = lines.iter().map(Value::to_string).collect();
                panic!(
                    "the OTLP receiver did not get {what} within {RECEIVE_WITHIN:?}; it got:\n{}",
                    all.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out);
    }
}

/// The SDK's tracer and meter providers, exporting to the receiver over
/// OTLP/HTTP with protobuf, and the global subscriber the observability guide gives
/// (every span to OpenTelemetry, logs at WARN).
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
}

impl Telemetry {
    pub fn install(receiver: &Receiver) -> Self {
        let resource = Resource::builder().with_service_name(SERVICE_NAME).build();
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(receiver.endpoint("traces"))
            .build()
            .expect("OTLP span exporter");
        let tracer_provider = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_batch_exporter(spans)
            .build();
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(receiver.endpoint("metrics"))
            .build()
            .expect("OTLP metric exporter");
        // The test flushes; the interval only has to be longer than the test.
        let reader = PeriodicReader::builder(metrics)
            .with_interval(Duration::from_secs(600))
            .build();
        let meter_provider = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(reader)
            .build();

        let tracer = tracer_provider.tracer("consumer-otlp-test");
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(tracer))
            .with(tracing_subscriber::fmt::layer().with_filter(EnvFilter::new("warn")))
            .try_init()
            .expect("the subscriber is global: one test per OTLP test binary");
        Self {
            tracer_provider,
            meter_provider,
        }
    }

    /// The meter to give the consumer and the relay.
    pub fn meter(&self) -> Meter {
        self.meter_provider
            .meter_with_scope(consumer::metrics::scope())
    }

    /// Exports everything recorded so far and stops both providers: no
    /// waiting on an interval. Blocking (the exporters' own threads do the
    /// HTTP).
    pub fn shutdown(&self) {
        self.tracer_provider.force_flush().expect("flush spans");
        self.meter_provider.force_flush().expect("flush metrics");
        self.tracer_provider
            .shutdown()
            .expect("shut the tracer provider down");
        self.meter_provider
            .shutdown()
            .expect("shut the meter provider down");
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct OrderPlaced {
    pub order_id: String,
}

// Named apart from the Kafka group, so the group attributes show which of
// the two they carry.
#[handler(event_type = "OrderPlaced")]
async fn ship_order(_order: OrderPlaced, _tx: &mut PgTx) -> Result<(), std::convert::Infallible> {
    Ok(())
}

/// What one backend's run must show.
pub struct Expected {
    /// `messaging.system`: `kafka`, `rabbitmq`.
    pub system: &'static str,
    /// The relay's destination (the outbox's, and its metrics').
    pub send_destination: String,
    /// What the publisher's span calls it (`send <this>`, and
    /// `messaging.destination.name`): the conventions' form on RabbitMQ.
    pub send_span_destination: String,
    /// The handler's destination (topic, queue): `process <this>`.
    pub process_destination: String,
    /// `messaging.consumer.group.name` of the handler's span and metrics:
    /// the Kafka group; `None` where the system has no groups.
    pub group: Option<String>,
}

/// The flow end to end. `connect` makes the source once the event is on
/// the broker (RabbitMQ: the caller declared the queue before).
pub async fn run<P, Src, F>(
    telemetry: &Telemetry,
    publisher: P,
    connect: F,
    expected: &Expected,
) -> Run
where
    P: Publisher,
    Src: Source,
    F: std::future::Future<Output = Src>,
{
    let pool = consumer::testing::FreshSchema::create("ct", 4)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .pool;
    let outbox = Outbox::new().with_default_destination(&expected.send_destination);

    let request = tracing::info_span!("request", otel.kind = "server");
    let request_trace = consumer::testing::trace_id_of(&request);
    let order_id = uuid::Uuid::new_v4().to_string();
    let event_id = async {
        let mut tx = pool.begin().await.expect("begin");
        let event = NewEvent::new(
            "Order",
            &order_id,
            "OrderPlaced",
            &OrderPlaced {
                order_id: order_id.clone(),
            },
        )
        .expect("json");
        let id = outbox.enqueue(&mut tx, event).await.expect("enqueue");
        tx.commit().await.expect("commit");
        id.to_string()
    }
    .instrument(request.clone())
    .await;
    drop(request);

    let relay = OutboxRelay::new(pool.clone(), outbox.clone(), publisher)
        .with_meter(telemetry.meter())
        .with_source("/tests/otlp");
    within("the relay publishing the event", async {
        while outbox.pending(&pool).await.expect("pending") > 0 {
            relay.run_once().await.expect("relay round");
        }
    })
    .await;

    let source = connect.await;
    let consumer =
        Consumer::new(source, PgStore::new(pool.clone()), ship_order).with_meter(telemetry.meter());
    let stats = consumer.stats();
    within(
        "the handler processing the event",
        consumer.run_until(async move {
            stats.wait_for(|s| s.processed >= 1).await;
        }),
    )
    .await
    .expect("consumer");

    Run {
        request_trace,
        event_id,
    }
}

/// What the flow left to look for.
pub struct Run {
    pub request_trace: String,
    pub event_id: String,
}

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("timed out after 60 s waiting for {what}"))
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

fn attr<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v["attributes"].get(key)
}

/// The span named `name` (each run's destinations are its own).
fn span<'a>(lines: &'a [Value], name: &str) -> Option<&'a Value> {
    lines
        .iter()
        .find(|l| str_of(l, "signal") == "span" && str_of(l, "name") == name)
}

/// The data points of metric `name` whose attributes include `want`.
fn points<'a>(lines: &'a [Value], name: &str, want: &[(&str, &str)]) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| str_of(l, "signal") == "metric" && str_of(l, "name") == name)
        .filter(|l| {
            want.iter()
                .all(|(k, v)| attr(l, k).and_then(Value::as_str) == Some(*v))
        })
        .collect()
}

/// What is wrong with what the receiver got, one sentence each.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    /// `span` has attribute `key` = `want` (`None`: has no `key`).
    fn attribute(&mut self, span: &Value, key: &str, want: Option<&str>) {
        let got = attr(span, key).and_then(Value::as_str);
        self.check(got == want, || {
            format!(
                "span `{}`: {key} is {got:?}, the conventions want {want:?}",
                str_of(span, "name")
            )
        });
    }
}

/// Flushes, then checks the receiver's output: one trace from the request
/// through the relay's send to the handler's process span, their kinds,
/// names and attributes by the messaging conventions (v1.44.0), and the
/// messaging metrics with their attributes. Reports every problem at once.
pub fn check(receiver: &Receiver, telemetry: &Telemetry, run: &Run, expected: &Expected) {
    telemetry.shutdown();

    let trace = run.request_trace.as_str();
    let send_name = format!("send {}", expected.send_span_destination);
    let process_name = format!("process {}", expected.process_destination);
    let metrics = [
        "messaging.client.sent.messages",
        "messaging.client.consumed.messages",
        "messaging.process.duration",
    ];
    let lines = receiver.wait_for(
        &format!(
            "the spans `request`, `{send_name}`, `{process_name}` and the metrics {metrics:?}"
        ),
        |lines| {
            ["request", send_name.as_str(), process_name.as_str()]
                .iter()
                .all(|n| span(lines, n).is_some())
                && metrics.iter().all(|m| !points(lines, m, &[]).is_empty())
        },
    );
    let mut problems = Problems::default();

    let request = span(&lines, "request").expect("request span");
    let send = span(&lines, &send_name).expect("send span");
    let process = span(&lines, &process_name).expect("process span");
    for s in [request, send, process] {
        problems.check(s["resource"]["service.name"] == SERVICE_NAME, || {
            format!(
                "the provider's resource is missing from span `{}`: {s}",
                str_of(s, "name")
            )
        });
    }

    // The trace: request (root) -> send (the relay) -> process (the handler).
    for s in [request, send, process] {
        problems.check(str_of(s, "trace_id") == trace, || {
            format!(
                "span `{}` is in trace {}, not in the request's trace {trace}",
                str_of(s, "name"),
                str_of(s, "trace_id")
            )
        });
    }
    problems.check(str_of(request, "parent_span_id").is_empty(), || {
        format!("the request span is not a root: {request}")
    });
    problems.check(
        str_of(send, "parent_span_id") == str_of(request, "span_id"),
        || {
            format!(
                "the relay's span is not a child of the enqueuing transaction's span {}: {send}",
                str_of(request, "span_id")
            )
        },
    );
    problems.check(
        str_of(process, "parent_span_id") == str_of(send, "span_id"),
        || format!("the handler's span is not a child of the relay's send span {}, whose context the message carried: {process}", str_of(send, "span_id")),
    );
    // Whatever else the trace holds (settle spans), its parent links stay
    // inside it and it has one root.
    let in_trace: Vec<&Value> = lines
        .iter()
        .filter(|l| str_of(l, "signal") == "span" && str_of(l, "trace_id") == trace)
        .collect();
    for s in &in_trace {
        let parent = str_of(s, "parent_span_id");
        let is_request = str_of(s, "span_id") == str_of(request, "span_id");
        problems.check(
            if is_request {
                parent.is_empty()
            } else {
                in_trace.iter().any(|p| str_of(p, "span_id") == parent)
            },
            || {
                format!(
                    "span `{}` of trace {trace} has a parent outside it: {s}",
                    str_of(s, "name")
                )
            },
        );
    }

    // Kinds, names (found above by name) and attributes.
    problems.check(str_of(request, "kind") == "server", || {
        format!(
            "the request span is {}, not server",
            str_of(request, "kind")
        )
    });
    problems.check(str_of(send, "kind") == "producer", || {
        format!(
            "`{send_name}` is {}, the conventions want producer",
            str_of(send, "kind")
        )
    });
    problems.check(str_of(process, "kind") == "consumer", || {
        format!(
            "`{process_name}` is {}, the conventions want consumer",
            str_of(process, "kind")
        )
    });
    for (s, operation, destination) in [
        (send, "send", &expected.send_span_destination),
        (process, "process", &expected.process_destination),
    ] {
        problems.attribute(s, "messaging.system", Some(expected.system));
        problems.attribute(s, "messaging.operation.name", Some(operation));
        problems.attribute(s, "messaging.operation.type", Some(operation));
        problems.attribute(s, "messaging.destination.name", Some(destination));
        problems.attribute(s, "messaging.message.id", Some(&run.event_id));
    }
    problems.attribute(
        process,
        "messaging.consumer.group.name",
        expected.group.as_deref(),
    );

    // Metrics, cumulative: the last export holds the totals.
    let system = ("messaging.system", expected.system);
    let sent = points(
        &lines,
        "messaging.client.sent.messages",
        &[
            system,
            ("messaging.destination.name", &expected.send_destination),
            ("messaging.operation.name", "send"),
        ],
    );
    problems.check(
        sent.iter()
            .any(|p| p["value"].as_f64() >= Some(1.0) && attr(p, "error.type").is_none()),
        || format!("no messaging.client.sent.messages point counts the relay's event: {sent:?}"),
    );

    let mut consumer_attrs = vec![
        system,
        (
            "messaging.destination.name",
            expected.process_destination.as_str(),
        ),
    ];
    if let Some(group) = &expected.group {
        consumer_attrs.push(("messaging.consumer.group.name", group));
    }
    let consumed = points(
        &lines,
        "messaging.client.consumed.messages",
        &[
            consumer_attrs.as_slice(),
            &[("messaging.operation.name", "receive")],
        ]
        .concat(),
    );
    problems.check(consumed.iter().any(|p| p["value"].as_f64() >= Some(1.0)), || {
        format!("no messaging.client.consumed.messages point with {consumer_attrs:?} counts the delivery: {consumed:?}")
    });
    let processed = points(
        &lines,
        "messaging.process.duration",
        &[
            consumer_attrs.as_slice(),
            &[("messaging.operation.name", "process")],
        ]
        .concat(),
    );
    problems.check(
        processed.iter().any(|p| {
            p["count"].as_u64() >= Some(1)
                && attr(p, "error.type").is_none()
                && str_of(p, "kind") == "histogram"
                && str_of(p, "unit") == "s"
        }),
        || format!("no messaging.process.duration histogram (s) with {consumer_attrs:?} timed the handler: {processed:?}"),
    );
    if expected.group.is_none() {
        for name in [
            "messaging.client.consumed.messages",
            "messaging.process.duration",
        ] {
            for p in points(&lines, name, &[system]) {
                problems.check(attr(p, "messaging.consumer.group.name").is_none(), || {
                    format!(
                        "{name} has a consumer group, and {} has none: {p}",
                        expected.system
                    )
                });
            }
        }
    }

    if !problems.0.is_empty() {
        let received: Vec<String> = lines.iter().map(Value::to_string).collect();
        panic!(
            "over OTLP, {} problem(s):\n- {}\n\nthe receiver got:\n{}",
            problems.0.len(),
            problems.0.join("\n- "),
            received.join("\n")
        );
    }
}
