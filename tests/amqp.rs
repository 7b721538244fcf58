//! RabbitMQ backend behaviour beyond the shared suite (needs RabbitMQ:
//! `AMQP_URL`, and PostgreSQL: `DATABASE_URL`): messages from a plain AMQP
//! client with no framework headers, unroutable publishes, and a consumer
//! process killed with SIGKILL mid-batch.

mod conformance;

use std::time::Duration;

use consumer::amqp::{AmqpPublisher, AmqpSource};
use consumer::{Consumer, DeadLetterKind, Message, Outgoing, PgTx, Publisher, handler};
use lapin::BasicProperties;
use lapin::options::BasicPublishOptions;

use crate::conformance::amqp::{amqp_url, connect, test_topology, unique_prefix};
use crate::conformance::support::{self, Harness, Job, JobError, PgHarness};

#[handler(idempotency_key = job.id, retry = exponential(base = "10ms", max_delay = "100ms", attempts = 3))]
async fn record(job: Job, tx: &mut PgTx, ctx: &consumer::MessageContext) -> Result<(), JobError> {
    if job.jitter {
        // Slows the batch so the kill lands in the middle of it.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    PgHarness::insert_effect(tx, "record", &job, ctx.message_id()).await?;
    Ok(())
}

async fn effects(h: &PgHarness) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM effects WHERE handler = 'record'")
        .fetch_one(h.pool())
        .await
        .expect("count effects")
}

async fn duplicated_effects(h: &PgHarness) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT job_id FROM effects WHERE handler = 'record' \
         GROUP BY job_id HAVING count(*) > 1) d",
    )
    .fetch_one(h.pool())
    .await
    .expect("count duplicates")
}

/// Polls the effects table (the database has no event to await).
async fn wait_effects(h: &PgHarness, at_least: i64) {
    support::within(async {
        while effects(h).await < at_least {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_from_a_plain_amqp_client_is_dead_lettered_under_the_header_names_it_was_sent_with()
{
    let h = PgHarness::new().await;
    let queue = unique_prefix("plain");
    let source = AmqpSource::builder(amqp_url(), test_topology(&queue))
        .connect()
        .await
        .expect("RabbitMQ source");
    let metrics = source.stats();

    // A plain lapin client: default properties, no message id; the first
    // message with headers under other bindings' names than the
    // framework's, the others with none.
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    let good = serde_json::to_vec(&Job::new("plain", 1)).expect("json");
    let mut named = lapin::types::FieldTable::default();
    let sent_names = ["cloudEvents:type", "ce_partitionkey", "x-tenant"];
    for (name, value) in sent_names.into_iter().zip(["Job", "p-1", "acme"]) {
        named.insert(
            name.into(),
            lapin::types::AMQPValue::LongString(value.into()),
        );
    }
    for (body, properties) in [
        (
            &b"\x00\x01 not json"[..],
            BasicProperties::default().with_headers(named),
        ),
        (&br#"{"unexpected": true}"#[..], BasicProperties::default()),
        (&good[..], BasicProperties::default()),
    ] {
        channel
            .basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
    }

    let consumer = Consumer::new(source, h.store(), record);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    support::within(stats.wait_for(|s| s.processed == 1 && s.dead_poison == 2)).await;
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");

    assert_eq!(effects(&h).await, 1);
    let depths = metrics.depths().await.expect("depths");
    assert_eq!((depths.work, depths.dead_letters), (0, 2));
    let got = dead_letters(&queue).await;
    assert_eq!(got.len(), 2);
    let (letter, names) = got
        .iter()
        .find(|(d, _)| &d.payload[..] == b"\x00\x01 not json")
        .expect("the letter of the message sent with headers");
    let original: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !n.starts_with("x-dlq-"))
        .collect();
    let mut sent_sorted = sent_names.to_vec();
    sent_sorted.sort_unstable();
    assert_eq!(
        original, sent_sorted,
        "the dead letter on the wire keeps the names the producer wrote, adds none and renames none"
    );
    assert_eq!(letter.key.as_deref(), Some("p-1"));
    let got: Vec<consumer::DeadLetter> = got.into_iter().map(|(d, _)| d).collect();
    for dl in &got {
        assert_eq!((dl.kind, dl.attempts), (DeadLetterKind::Poison, 1));
        assert_eq!(dl.origin.channel, queue);
        assert!(
            dl.message_id.starts_with("amqp-"),
            "content-hash id: {}",
            dl.message_id
        );
    }
    assert!(got.iter().any(|d| &d.payload[..] == b"\x00\x01 not json"));
    assert!(
        got.iter().any(|d| d.error.contains("missing field")
            || d.causes.iter().any(|c| c.contains("missing field"))),
        "{got:#?}"
    );
}

/// Each letter of `queue`'s dead-letter queue, with its header names as
/// they are on the wire (sorted).
async fn dead_letters(queue: &str) -> Vec<(consumer::DeadLetter, Vec<String>)> {
    let topology = test_topology(queue);
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    let mut out = Vec::new();
    while let Some(got) = channel
        .basic_get(
            topology.dead_letter_queue().into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .expect("basic.get")
    {
        let mut names: Vec<String> = (got.delivery.properties.headers().as_ref())
            .map(|t| t.inner().keys().map(|k| k.as_str().to_owned()).collect())
            .unwrap_or_default();
        names.sort_unstable();
        let env = consumer::amqp::headers::to_envelope(
            queue,
            &got.delivery,
            got.delivery.data.clone().into(),
        );
        let m = Message {
            key: env.key,
            headers: env.headers,
            payload: env.payload,
        };
        let letter = consumer::DeadLetter::from_message(&m).expect("a framework dead letter");
        out.push((letter, names));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_publish_is_a_non_retriable_error_not_a_silent_drop() {
    let queue = unique_prefix("route");
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    test_topology(&queue)
        .declare(&channel)
        .await
        .expect("declare");
    let publisher = AmqpPublisher::builder(amqp_url())
        .with_max_unconfirmed(2)
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    let ok = |n: i64| Outgoing {
        destination: format!("/{queue}"),
        message: Job::new("k", n).message(),
    };
    let lost = Outgoing {
        destination: format!("/{queue}-does-not-exist"),
        message: Message::raw(&b"x"[..]),
    };
    let results = publisher.publish(&[ok(1), lost, ok(2)]).await;
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    let err = results[1].as_ref().expect_err("unroutable must fail");
    assert!(!err.is_retriable(), "{err}");
    assert!(err.to_string().contains("unroutable"), "{err}");
    let depth = test_topology(&queue)
        .depths(conn.create_channel().await.expect("channel"))
        .await
        .expect("depths");
    assert_eq!(depth.work, 2);
}

const CHILD_ENV: &str = "CONSUMER_AMQP_KILL_CHILD";

/// The body of the child process that `a_consumer_killed_mid_batch...`
/// kills: consumes until killed. Run only as that child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child process of a_consumer_killed_mid_batch_..."]
async fn child_consumer_process() {
    let spec = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!(
            "{CHILD_ENV} is unset: this is the child process of a kill test, not a test of its own"
        )
    });
    let mut parts = spec.split(' ');
    let (Some(queue), Some(schema)) = (parts.next(), parts.next()) else {
        panic!("{CHILD_ENV} is `queue schema [batched]`");
    };
    let batched = parts.next() == Some("batched");
    let pool = consumer::testing::FreshSchema::pool_on(schema, 8)
        .await
        .expect("child pool");
    let source = AmqpSource::builder(amqp_url(), test_topology(queue))
        .with_prefetch(50)
        .build()
        .expect("topology");
    let store = consumer::Store::new(pool);
    let forever = std::future::pending();
    if batched {
        let handler = consumer::batch::Batched::new(RecordBatch).with_max_batch(16);
        Consumer::new(source, store, handler)
            .run_until(forever)
            .await
    } else {
        Consumer::new(source, store, record)
            .run_until(forever)
            .await
    }
    .expect("child consumer");
}

/// `record` in batches: the same effect per job, one transaction per batch.
struct RecordBatch;

impl consumer::batch::BatchHandler<consumer::PgStore> for RecordBatch {
    type Message = Job;

    fn name(&self) -> &'static str {
        "record"
    }

    fn retry_policy(&self) -> consumer::RetryPolicy {
        consumer::RetryPolicy::none()
    }

    fn idempotency_key(&self, job: &Job, _: &consumer::MessageContext) -> String {
        job.id.clone()
    }

    async fn handle_batch(
        &self,
        batch: &mut consumer::batch::Batch<Job>,
        tx: &mut PgTx,
    ) -> Result<(), consumer::BoxError> {
        for (_, item) in batch.iter() {
            if item.message().jitter {
                // Slows the batch so the kill lands in the middle of it.
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            PgHarness::insert_effect(tx, "record", item.message(), item.context().message_id())
                .await?;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_batch_is_redelivered_with_exactly_once_effects() {
    killed_mid_batch(false).await;
}

/// The same with a batched handler: the kill lands inside a batch's
/// transaction, which PostgreSQL rolls back; its messages come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_consumer_killed_mid_batch_is_redelivered_with_exactly_once_effects() {
    killed_mid_batch(true).await;
}

/// Runs `consumer` until `n` effects are in, then stops it.
async fn run_until_effects<R>(
    h: &PgHarness,
    consumer: Consumer<AmqpSource, consumer::PgStore, R>,
    n: i64,
) -> consumer::stats::StatsSnapshot
where
    R: consumer::router::Routes<consumer::PgStore>,
{
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    wait_effects(h, n).await;
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");
    stats.snapshot()
}

async fn killed_mid_batch(batched: bool) {
    let h = PgHarness::new().await;
    let queue = unique_prefix("kill");
    let n = 400;
    let publisher = AmqpPublisher::builder(amqp_url())
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    let conn = connect().await;
    test_topology(&queue)
        .declare(&conn.create_channel().await.expect("channel"))
        .await
        .expect("declare");
    let batch: Vec<Outgoing> = (0..n)
        .map(|i| Outgoing {
            destination: format!("/{queue}"),
            message: Job {
                jitter: true,
                ..Job::new(&format!("k{}", i % 10), i)
            }
            .message(),
        })
        .collect();
    for r in publisher.publish(&batch).await {
        r.expect("publish");
    }

    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "child_consumer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!(
                "{queue} {}{}",
                h.schema,
                if batched { " batched" } else { "" }
            ),
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn the child consumer");
    wait_effects(&h, 40).await;
    child.kill().expect("SIGKILL the child"); // Child::kill is SIGKILL on Unix
    let _ = child.wait();
    let after_kill = effects(&h).await;
    assert!(after_kill < n, "the kill came too late to be mid-batch");

    let source = AmqpSource::builder(amqp_url(), test_topology(&queue))
        .connect()
        .await
        .expect("source");
    let metrics = source.stats();
    let s = if batched {
        let handler = consumer::batch::Batched::new(RecordBatch).with_max_batch(16);
        run_until_effects(&h, Consumer::new(source, h.store(), handler), n).await
    } else {
        run_until_effects(&h, Consumer::new(source, h.store(), record), n).await
    };

    assert_eq!(effects(&h).await, n, "zero lost");
    assert_eq!(duplicated_effects(&h).await, 0, "zero duplicate effects");
    assert!(
        metrics.redelivered() > 0,
        "what the child held came back redelivered"
    );
    assert_eq!(s.dead_letters(), 0);
    // What the child committed is never run again: deliveries it committed
    // but had not acked come back and are skipped by dedup. (At most: a
    // COMMIT the child sent just before dying can land after the count.)
    assert!(
        i64::try_from(s.processed).expect("fits") <= n - after_kill,
        "processed {} after the child had committed {after_kill}",
        s.processed
    );
}

/// When publishing the dead letter keeps failing with errors that could
/// heal, the settle loop gives up at the settle timeout: the letter, with
/// its whole context, is kept in the store's dead-letter table (never in
/// RabbitMQ's own dead-lettering, which would drop the context), the
/// original is acked, and the consumer goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_still_failing_at_the_settle_timeout_is_kept_in_the_dead_letter_table() {
    use crate::conformance::amqp::AmqpBroker;
    use crate::conformance::broker::BrokerHarness;

    let h = PgHarness::new().await;
    let broker = <AmqpBroker as BrokerHarness>::new(1).await;
    let poison = Message::raw(&b"not json"[..])
        .with_key("k")
        .with_id("dlq-down");
    BrokerHarness::publish(&broker, "t", poison)
        .await
        .expect("publish");
    let after = Job::new("k", 2);
    BrokerHarness::publish(&broker, "t", after.message())
        .await
        .expect("publish");
    broker.fail_next_publishes(1_000);

    let consumer = Consumer::new(BrokerHarness::source(&broker, "t").await, h.store(), record)
        .with_settle_timeout(Duration::from_millis(400));
    let stats = consumer.stats();
    let drained = broker.clone();
    support::within(
        consumer.run_until(async move { BrokerHarness::wait_drained(&drained, "t").await }),
    )
    .await
    .expect("consumer");

    assert!(BrokerHarness::dead_letters(&broker, "t").await.is_empty());
    let stored = h.stored_dead_letters().await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].message_id, "dlq-down");
    assert_eq!(stored[0].payload, b"not json");
    assert!(
        stored[0].refusal.contains("injected"),
        "{}",
        stored[0].refusal
    );
    let s = stats.snapshot();
    assert!(s.settle_errors >= 2, "{s:?}");
    assert_eq!((s.dead_poison, s.dead_letters_stored), (1, 1));
    assert_eq!(effects(&h).await, 1, "the consumer went on");
}

#[handler(retry = exponential(base = "1s", max_delay = "1h", attempts = 20, mode = redeliver))]
async fn slow_retries(job: Job, tx: &mut PgTx) -> Result<(), JobError> {
    PgHarness::insert_effect(tx, "slow_retries", &job, &job.id).await?;
    Ok(())
}

/// Delay queues that hold less than the handler's longest retry delay
/// would send copies back early: the consumer refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_longer_than_the_longest_delay_queue_are_refused_at_start() {
    let h = PgHarness::new().await;
    let queue = unique_prefix("delays");
    let source = AmqpSource::builder(amqp_url(), test_topology(&queue))
        .build()
        .expect("topology");
    let err = Consumer::new(source, h.store(), slow_retries)
        .run_until(std::future::pending())
        .await
        .expect_err("must refuse");
    assert!(
        matches!(err, consumer::Error::RetryUnsupported { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("with_max_retry_delay"), "{err}");
}

/// A message without an id, handed out again by RabbitMQ (requeued, and on a
/// quorum queue counted in `x-delivery-count`) and then dead-lettered
/// through another exchange with `x-death`, keeps its content-hash id;
/// another message that differs only in a header's type gets another one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_content_hash_id_survives_requeue_and_dead_lettering_on_rabbitmq() {
    use lapin::options::{BasicNackOptions, BasicRejectOptions, QueueDeclareOptions};
    use lapin::types::{AMQPValue, FieldTable};

    for quorum in [false, true] {
        let work = unique_prefix("cid");
        let dead = format!("{work}.dead");
        let conn = connect().await;
        let channel = conn.create_channel().await.expect("channel");
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        let mut expiring = FieldTable::default();
        expiring.insert("x-expires".into(), AMQPValue::LongInt(600_000));
        if quorum {
            expiring.insert(
                "x-queue-type".into(),
                AMQPValue::LongString("quorum".into()),
            );
        }
        let mut args = expiring.clone();
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString("".into()),
        );
        args.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(dead.as_str().into()),
        );
        channel
            .queue_declare(work.as_str().into(), durable, args)
            .await
            .expect("declare work queue");
        channel
            .queue_declare(dead.as_str().into(), durable, expiring)
            .await
            .expect("declare dead queue");
        let publish = |n: AMQPValue| {
            let mut headers = FieldTable::default();
            headers.insert("n".into(), n);
            let props = BasicProperties::default()
                .with_content_type("application/json".into())
                .with_headers(headers);
            let channel = channel.clone();
            let work = work.clone();
            async move {
                channel
                    .basic_publish(
                        "".into(),
                        work.as_str().into(),
                        BasicPublishOptions::default(),
                        b"{}",
                        props,
                    )
                    .await
                    .expect("publish")
                    .await
                    .expect("confirm");
            }
        };
        publish(AMQPValue::LongInt(1)).await;
        publish(AMQPValue::LongString("1".into())).await;

        let get = |queue: String| {
            let channel = channel.clone();
            async move {
                support::within(async {
                    loop {
                        if let Some(got) = channel
                            .basic_get(
                                queue.as_str().into(),
                                lapin::options::BasicGetOptions::default(),
                            )
                            .await
                            .expect("basic.get")
                        {
                            break got.delivery;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
                .await
            }
        };
        let id = |queue: &str, d: &lapin::message::Delivery| {
            consumer::amqp::headers::to_envelope(queue, d, d.data.clone().into()).id
        };

        let first = get(work.clone()).await;
        let other = get(work.clone()).await;
        let (first_id, other_id) = (id(&work, &first), id(&work, &other));
        assert!(first_id.starts_with("amqp-"), "{first_id}");
        assert_ne!(first_id, other_id, "n = 1 and n = \"1\" are two messages");
        other
            .ack(lapin::options::BasicAckOptions::default())
            .await
            .expect("ack");
        first
            .nack(BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            })
            .await
            .expect("nack");

        let again = get(work.clone()).await;
        assert!(again.redelivered);
        if quorum {
            let count = again
                .properties
                .headers()
                .as_ref()
                .and_then(|h| h.inner().get("x-delivery-count").cloned());
            assert!(
                count.is_some(),
                "a quorum queue counts deliveries: {:?}",
                again.properties
            );
        }
        assert_eq!(id(&work, &again), first_id, "requeued (quorum: {quorum})");
        again
            .reject(BasicRejectOptions { requeue: false })
            .await
            .expect("reject");

        let dead_lettered = get(dead.clone()).await;
        let headers = dead_lettered
            .properties
            .headers()
            .clone()
            .unwrap_or_default();
        assert!(headers.inner().contains_key("x-death"), "{headers:?}");
        assert_eq!(dead_lettered.routing_key.as_str(), dead);
        assert_eq!(
            id(&dead, &dead_lettered),
            first_id,
            "dead-lettered (quorum: {quorum})"
        );
        dead_lettered
            .ack(lapin::options::BasicAckOptions::default())
            .await
            .expect("ack");
    }
}
