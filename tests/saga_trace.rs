//! One span per saga transition, a child of the span of the delivery that
//! triggered it, in the producer's trace (no services: the test kit). A
//! binary of its own: the span exporter is a process-wide subscriber.

use consumer::saga::{NotFound, SagaBuilder, Step};
use consumer::testing::TestKit;
use consumer::{Message, Outbox, Saga};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[derive(serde::Serialize, serde::Deserialize)]
struct Ev {
    id: String,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Seen {
    n: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

struct Traced;

impl Saga for Traced {
    type State = Seen;
    type Error = Never;
    fn name(&self) -> &'static str {
        "traced"
    }
}

fn seen(_: &Traced, s: &mut Seen, _: Ev, step: &mut Step<'_>) -> Result<(), Never> {
    s.n += 1;
    if s.n == 2 {
        step.complete();
    }
    Ok(())
}

fn attribute(span: &opentelemetry_sdk::trace::SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test]
async fn each_transition_has_one_span_a_child_of_its_deliverys_span() {
    let exporter = consumer::testing::in_memory_spans();
    let mut kit = TestKit::builder()
        .with_store(|store| store.with_extension(consumer::saga::SagaTables))
        .start()
        .await
        .expect("the test kit");
    let id = |e: &Ev| e.id.clone();
    let saga = SagaBuilder::new(Traced, Outbox::new())
        .on("Started", id, NotFound::Start, seen)
        .on("Ended", id, NotFound::Ignore, seen)
        .build()
        .expect("saga");
    kit.handler("t", saga);
    let mut ids = Vec::new();
    for kind in ["Started", "Ended", "Ended"] {
        let m = Message::json(kind, &Ev { id: "s".into() })
            .expect("json")
            .with_key("s")
            .with_header("traceparent", TRACEPARENT);
        let sent = kit.send("t", m).await.expect("send");
        ids.push(sent.id.unwrap_or_default());
    }
    kit.settle().await.expect("settled");

    // sqlx's SQLite worker thread keeps the caller's span for each command
    // until it has answered, so the last `process` span may still be open
    // on that thread. The pool's one connection runs its commands in order:
    // once one more is answered, the earlier ones' spans are closed.
    sqlx::query("SELECT 1")
        .execute(kit.pool())
        .await
        .expect("SQLite");
    let spans = exporter.get_finished_spans().expect("spans");
    let of = |prefix: &str, message_id: &str| -> Vec<&opentelemetry_sdk::trace::SpanData> {
        spans
            .iter()
            .filter(|s| {
                s.name.starts_with(prefix)
                    && attribute(s, "messaging.message.id").as_deref() == Some(message_id)
            })
            .collect()
    };
    // The late `Ended` has its span too, and writes nothing: no version.
    let expected = [
        ("Started", Some("running"), Some("1")),
        ("Ended", Some("completed"), Some("2")),
        ("Ended", None, None),
    ];
    for (message_id, (event, status, version)) in ids.iter().zip(expected) {
        let process = of("process ", message_id);
        let transition = of("saga ", message_id);
        assert_eq!(
            (process.len(), transition.len()),
            (1, 1),
            "one process span and one transition span for {message_id}"
        );
        let (p, t) = (process[0], transition[0]);
        assert_eq!(t.name, format!("saga traced {event}"));
        assert_eq!(
            p.span_context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "the delivery continues the producer's trace"
        );
        assert_eq!(
            t.span_context.trace_id(),
            p.span_context.trace_id(),
            "the transition is in the delivery's trace"
        );
        assert_eq!(
            t.parent_span_id,
            p.span_context.span_id(),
            "the transition is a child of its delivery's span"
        );
        assert_eq!(
            attribute(t, "consumer.saga.type").as_deref(),
            Some("traced")
        );
        assert_eq!(attribute(t, "consumer.saga.id").as_deref(), Some("s"));
        assert_eq!(attribute(t, "consumer.saga.event").as_deref(), Some(event));
        assert_eq!(attribute(t, "consumer.saga.status").as_deref(), status);
        assert_eq!(attribute(t, "consumer.saga.version").as_deref(), version);
    }
    let transitions = spans.iter().filter(|s| s.name.starts_with("saga ")).count();
    assert_eq!(transitions, 3, "one span per delivery, none more");
}
