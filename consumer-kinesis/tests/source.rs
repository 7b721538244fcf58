//! [`KinesisSource`] against moto's Kinesis (`scripts/services sqs` starts
//! moto on 127.0.0.1:4566; `KINESIS_ENDPOINT` or `AWS_ENDPOINT_URL_KINESIS`
//! names another), driven through the backend `Source` and `Acker` traits
//! as the runtime drives them: per-key order, a checkpoint that never
//! passes an unsettled record, a restart from the checkpoint, leases
//! shared by two instances and taken from a crashed one, throttling and an
//! expired iterator injected around the real client (moto produces
//! neither), dead letters, and `redeliver` refused at start. Each test
//! works on streams of its own and deletes them.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use consumer_backend::{
    Acker, BrokerErrorKind, Envelope, Message, Outgoing, Publisher, RetryMode, RetryPolicy, Source,
    SourceReadings,
};
use consumer_kinesis::client::{
    ApiError, ApiFuture, AwsKinesis, IteratorStart, KinesisApi, PutEntry, PutOutcome, RecordsPage,
};
use consumer_kinesis::lease::{Checkpoint, LeaseStore, MemoryLeaseStore};
use consumer_kinesis::shards::ShardInfo;
use consumer_kinesis::{
    KinesisAcker, KinesisClient, KinesisPublisher, KinesisSource, KinesisStats,
};

use common::{DEADLINE, endpoint, list_shards, with_stream};

/// Faults moto cannot produce, around the real client.
#[derive(Default)]
struct Faults {
    /// `GetRecords` calls answered as throttled, without reaching moto.
    throttle_reads: AtomicU32,
    /// `GetRecords` calls, after one that returned records, answered as
    /// `ExpiredIteratorException`.
    expire_reads: AtomicU32,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

struct Faulty {
    real: AwsKinesis,
    faults: Arc<Faults>,
    read_some: std::sync::atomic::AtomicBool,
}

impl KinesisApi for Faulty {
    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: Vec<PutEntry>,
    ) -> ApiFuture<'a, Vec<PutOutcome>> {
        self.real.put_records(stream, entries)
    }

    fn list_shards<'a>(&'a self, stream: &'a str) -> ApiFuture<'a, Vec<ShardInfo>> {
        self.real.list_shards(stream)
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard_id: &'a str,
        start: &'a IteratorStart,
    ) -> ApiFuture<'a, String> {
        self.real.shard_iterator(stream, shard_id, start)
    }

    fn get_records<'a>(&'a self, iterator: &'a str, limit: i32) -> ApiFuture<'a, RecordsPage> {
        Box::pin(async move {
            if take(&self.faults.throttle_reads) {
                return Err(ApiError::service(
                    "ProvisionedThroughputExceededException",
                    "Rate exceeded for shard (injected)",
                ));
            }
            if self.read_some.load(Ordering::SeqCst) && take(&self.faults.expire_reads) {
                return Err(ApiError::service(
                    "ExpiredIteratorException",
                    "Iterator expired (injected)",
                ));
            }
            let page = self.real.get_records(iterator, limit).await?;
            if !page.records.is_empty() {
                self.read_some.store(true, Ordering::SeqCst);
            }
            Ok(page)
        })
    }
}

fn client(faults: &Arc<Faults>) -> KinesisClient {
    KinesisClient::from_api(Arc::new(Faulty {
        real: AwsKinesis::local(endpoint()),
        faults: Arc::clone(faults),
        read_some: std::sync::atomic::AtomicBool::new(false),
    }))
}

type Store = Arc<MemoryLeaseStore>;

/// A source with test settings: short leases and polls.
async fn test_source(
    stream: &str,
    store: &Store,
    owner: &str,
    faults: &Arc<Faults>,
) -> KinesisSource<Store> {
    KinesisSource::builder(client(faults), stream, Arc::clone(store))
        .with_owner(owner)
        .with_lease_duration(Duration::from_secs(2))
        .with_poll_interval(Duration::from_millis(200))
        .with_checkpoint_interval(Duration::from_millis(50))
        .connect()
        .await
        .expect("a source on the test's stream")
}

fn orders(stream: &str, keys: &[&str], from: u64, to: u64) -> Vec<Outgoing> {
    (from..to)
        .flat_map(|n| {
            keys.iter().map(move |k| Outgoing {
                destination: stream.to_owned(),
                message: Message::json("OrderChanged", &serde_json::json!({"key": k, "n": n}))
                    .expect("a JSON value serialises")
                    .with_key(*k),
            })
        })
        .collect()
}

async fn publish(stream: &str, keys: &[&str], from: u64, to: u64) {
    let publisher = KinesisPublisher::builder(KinesisClient::local(endpoint())).build();
    let results = publisher.publish(&orders(stream, keys, from, to)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

type Delivery = (Arc<Envelope>, KinesisAcker);

/// The next `n` deliveries, within [`DEADLINE`].
async fn recv_n(source: &mut KinesisSource<Store>, n: usize) -> Vec<Delivery> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let next = tokio::time::timeout(DEADLINE, source.recv())
            .await
            .unwrap_or_else(|_| panic!("{} of {n} records within {DEADLINE:?}", got.len()))
            .expect("recv");
        got.push(next.expect("the source stays open"));
    }
    got
}

/// `n` of an order's payload.
fn n_of(e: &Envelope) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&e.payload).expect("JSON payload");
    v["n"].as_u64().expect("an n")
}

/// The sequence number an envelope's position (`shard/sequence`) names.
fn sequence(e: &Envelope) -> String {
    e.origin
        .position
        .rsplit('/')
        .next()
        .expect("shard/sequence")
        .to_owned()
}

/// Polls `check` until it holds, failing with `what` after [`DEADLINE`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while !check().await {
        assert!(Instant::now() < deadline, "{what} within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn checkpoint(store: &Store, shard: &str) -> Option<Checkpoint> {
    store.checkpoint_of(shard).await.expect("in memory")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_source_keeps_key_order_and_checkpoints_only_past_settled_records() {
    with_stream("src-order", 1, |sdk, stream| async move {
        let shard = list_shards(&sdk, &stream).await.remove(0).id;
        publish(&stream, &["a", "b", "c"], 0, 10).await;
        sdk.put_record()
            .stream_name(&stream)
            .partition_key("plain-1")
            .data(Blob::new(&b"{\"plain\":true}"[..]))
            .send()
            .await
            .expect("PutRecord");
        let store = Store::default();
        let faults = Arc::default();
        let mut source = test_source(&stream, &store, "a", &faults).await;
        let mut got = recv_n(&mut source, 31).await;
        let plain = got.pop().expect("the plain record, last");
        assert_eq!(plain.0.key.as_deref(), Some("plain-1"));
        assert_eq!(&plain.0.payload[..], b"{\"plain\":true}");
        for key in ["a", "b", "c"] {
            let ns: Vec<u64> = got
                .iter()
                .filter(|(e, _)| e.key.as_deref() == Some(key))
                .map(|(e, _)| n_of(e))
                .collect();
            assert_eq!(ns, (0..10).collect::<Vec<_>>(), "{key}");
        }
        // The 11th record stays unsettled: the checkpoint stops before it.
        let held = got.remove(10);
        let before = sequence(&got[9].0);
        for (_, acker) in got {
            acker.ack().await.expect("ack");
        }
        plain.1.ack().await.expect("ack");
        let want = Some(Checkpoint::At(before.clone()));
        eventually("the checkpoint at the 10th record", || async {
            checkpoint(&store, &shard).await == want
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            checkpoint(&store, &shard).await,
            want,
            "not past the held record"
        );
        // The gauges: one held shard; 21 records from the unsettled one on
        // (what a restart reads again, as Kafka counts from its position).
        let gauges = source.gauges().expect("a Kinesis source has gauges");
        let mut readings = SourceReadings::default();
        gauges.observe(&mut readings);
        let held_shard = &readings.partitions_read()[0];
        assert_eq!((held_shard.partition, held_shard.lag), (0, 21));
        assert!(held_shard.oldest_age > Duration::ZERO, "{held_shard:?}");
        let last = sequence(&plain.0);
        held.1.ack().await.expect("ack");
        let want = Some(Checkpoint::At(last));
        eventually("the checkpoint at the last record", || async {
            checkpoint(&store, &shard).await == want
        })
        .await;
        source.close().await;
        let leases = store.leases().await.expect("in memory");
        assert!(
            leases.iter().all(|l| l.owner.is_none()),
            "released: {leases:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_source_restarts_from_its_checkpoint_and_replays_a_released_record() {
    with_stream("src-restart", 1, |_sdk, stream| async move {
        publish(&stream, &["a", "b"], 0, 5).await;
        let store = Store::default();
        let faults = Arc::default();
        let mut first = test_source(&stream, &store, "a", &faults).await;
        let mut got = recv_n(&mut first, 10).await;
        // A release rewinds the shard to the checkpoint once nothing else
        // is held: the record comes again, and so do the settled ones
        // after it (dedup's part).
        let released = got.remove(3);
        let id = released.0.id.clone();
        released.1.release().await.expect("release");
        for (_, acker) in got {
            acker.ack().await.expect("ack");
        }
        let again = recv_n(&mut first, 7).await;
        assert_eq!(again[0].0.id, id, "the released record first");
        for (_, acker) in again {
            acker.ack().await.expect("ack");
        }
        assert_eq!(first.stats().snapshot().rewinds, 1);
        first.close().await;
        publish(&stream, &["a", "b"], 5, 8).await;
        let mut second = test_source(&stream, &store, "b", &faults).await;
        let got = recv_n(&mut second, 6).await;
        let ns: Vec<u64> = got.iter().map(|(e, _)| n_of(e)).collect();
        assert!(
            ns.iter().all(|n| *n >= 5),
            "only what was not settled: {ns:?}"
        );
        let extra = tokio::time::timeout(Duration::from_millis(800), second.recv()).await;
        assert!(extra.is_err(), "nothing more: {extra:?}");
        second.close().await;
    })
    .await;
}

/// Receives and acks until stopped, then closes (or, `crash`, drops).
fn run(
    mut source: KinesisSource<Store>,
) -> (
    tokio::sync::oneshot::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<bool>();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                crash = &mut stopped => {
                    if crash.unwrap_or(true) { drop(source) } else { source.close().await }
                    return;
                }
                got = source.recv() => {
                    if let Ok(Some((_, acker))) = got {
                        let _ = acker.ack().await;
                    }
                }
            }
        }
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_two_instances_share_the_shards_and_take_a_crashed_ones() {
    with_stream("src-leases", 4, |_sdk, stream| async move {
        let store = Store::default();
        let faults = Arc::default();
        let a = test_source(&stream, &store, "a", &faults).await;
        let a_stats = a.stats();
        let (stop_a, task_a) = run(a);
        eventually("a holds all four shards", || async {
            a_stats.snapshot().leases_held == 4
        })
        .await;
        let b = test_source(&stream, &store, "b", &faults).await;
        let b_stats = b.stats();
        let (crash_b, task_b) = run(b);
        eventually("a and b hold two shards each", || async {
            (
                a_stats.snapshot().leases_held,
                b_stats.snapshot().leases_held,
            ) == (2, 2)
        })
        .await;
        let _ = crash_b.send(true);
        task_b.await.expect("b stops");
        eventually("a takes b's expired leases", || async {
            a_stats.snapshot().leases_held == 4
        })
        .await;
        let _ = stop_a.send(false);
        task_a.await.expect("a closes");
        let leases = store.leases().await.expect("in memory");
        assert!(leases.iter().all(|l| l.owner.is_none()), "{leases:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_source_backs_off_when_throttled_and_renews_an_expired_iterator() {
    with_stream("src-faults", 1, |_sdk, stream| async move {
        publish(&stream, &["a"], 0, 12).await;
        let faults = Arc::new(Faults::default());
        faults.throttle_reads.store(3, Ordering::SeqCst);
        faults.expire_reads.store(1, Ordering::SeqCst);
        let store = Store::default();
        let mut source = KinesisSource::builder(client(&faults), &stream, Arc::clone(&store))
            .with_poll_interval(Duration::from_millis(200))
            .with_batch_size(4)
            .connect()
            .await
            .expect("a source");
        let got = recv_n(&mut source, 12).await;
        let ns: Vec<u64> = got.iter().map(|(e, _)| n_of(e)).collect();
        assert_eq!(ns, (0..12).collect::<Vec<_>>(), "each once, in order");
        let s = source.stats().snapshot();
        assert_eq!(s.throttled, 3, "{s:?}");
        assert_eq!(s.iterators_renewed, 1, "{s:?}");
        for (_, acker) in got {
            acker.ack().await.expect("ack");
        }
        source.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_dead_letters_go_to_the_configured_stream_or_back_to_the_runtime() {
    with_stream("src-dlq", 1, |sdk, stream| async move {
        let dead = common::create_stream(&sdk, "src-dlq-dead", 1).await;
        publish(&stream, &["a"], 0, 1).await;
        let store = Store::default();
        let mut source = KinesisSource::builder(
            KinesisClient::local(endpoint()),
            &stream,
            Arc::clone(&store),
        )
        .with_dead_letter_stream(&dead)
        .with_poll_interval(Duration::from_millis(200))
        .connect()
        .await
        .expect("a source");
        let (envelope, mut acker) = recv_n(&mut source, 1).await.remove(0);
        let letter = Message::raw(envelope.payload.clone())
            .with_key("a")
            .with_header("x-consumer-error", "boom");
        acker
            .publish_dead_letter(&letter)
            .await
            .expect("the dead-letter stream takes it");
        acker.ack().await.expect("ack");
        assert_eq!(source.stats().snapshot().dead_letters, 1);
        source.close().await;
        let shard = list_shards(&sdk, &dead).await.remove(0).id;
        let it = sdk
            .get_shard_iterator()
            .stream_name(&dead)
            .shard_id(shard)
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("GetShardIterator");
        let out = sdk
            .get_records()
            .shard_iterator(it.shard_iterator().unwrap_or_default())
            .send()
            .await
            .expect("GetRecords");
        let _ = sdk.delete_stream().stream_name(&dead).send().await;
        assert_eq!(out.records().len(), 1);
        let read = consumer_kinesis::envelope::decode(out.records()[0].data().as_ref(), "a")
            .expect("an envelope");
        assert_eq!(read.key.as_deref(), Some("a"));
        assert_eq!(
            read.headers.get("x-consumer-error").ok().flatten(),
            Some("boom")
        );

        let faults = Arc::default();
        let mut bare = test_source(&stream, &Store::default(), "c", &faults).await;
        let (_, mut acker) = recv_n(&mut bare, 1).await.remove(0);
        let refused = acker
            .publish_dead_letter(&letter)
            .await
            .expect_err("no destination");
        assert_eq!(refused.broker_kind(), Some(BrokerErrorKind::NoDestination));
        acker.ack().await.expect("ack");
        bare.close().await;
    })
    .await;
}

#[tokio::test]
async fn kinesis_source_refuses_retries_through_the_broker_at_start() {
    with_stream("src-retry", 1, |_sdk, stream| async move {
        let faults = Arc::default();
        let mut source = test_source(&stream, &Store::default(), "a", &faults).await;
        let redeliver = RetryPolicy::DEFAULT.with_mode(RetryMode::Redeliver);
        let refusal = source.accept_retry_policy(&redeliver).expect_err("refused");
        assert!(
            refusal.contains("in_place") && refusal.contains(&stream),
            "{refusal}"
        );
        source
            .accept_retry_policy(&RetryPolicy::DEFAULT)
            .expect("in place is served");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_three_instances_rebalance_as_one_is_killed_and_restarted_repeatedly() {
    with_stream("src-churn", 6, |_sdk, stream| async move {
        let store = Store::default();
        let faults = Arc::default();
        let mut running = Vec::new();
        for owner in ["a", "b", "c"] {
            let source = test_source(&stream, &store, owner, &faults).await;
            let stats = source.stats();
            running.push((stats, run(source)));
        }
        let held = |running: &Vec<(KinesisStats, _)>| -> Vec<u64> {
            running
                .iter()
                .map(|(s, _): &(KinesisStats, _)| s.snapshot().leases_held)
                .collect()
        };
        for round in 0..3 {
            eventually(&format!("round {round}: two shards each"), || async {
                held(&running) == [2, 2, 2]
            })
            .await;
            // The last instance is killed: its leases expire, the others
            // take them; then it comes back and gets its share again.
            let (_, (crash, task)) = running.pop().expect("three");
            let _ = crash.send(true);
            task.await.expect("stops");
            eventually(&format!("round {round}: three shards each"), || async {
                held(&running) == [3, 3]
            })
            .await;
            let owner = format!("c{round}");
            let source = test_source(&stream, &store, &owner, &faults).await;
            let stats = source.stats();
            running.push((stats, run(source)));
        }
        eventually("two shards each at the end", || async {
            held(&running) == [2, 2, 2]
        })
        .await;
        for (_, (stop, task)) in running {
            let _ = stop.send(false);
            task.await.expect("closes");
        }
        let leases = store.leases().await.expect("in memory");
        assert!(leases.iter().all(|l| l.owner.is_none()), "{leases:?}");
    })
    .await;
}
