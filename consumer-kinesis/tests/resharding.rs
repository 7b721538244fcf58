//! Resharding under a [`KinesisSource`]: a split and then a merge in the
//! middle of a stream, each key's records checked in order across both,
//! a child read only once its parents are read and settled to their end
//! (the KCL's rule), a finished parent's lease ended.
//!
//! On an in-process Kinesis ([`fake`]): moto cannot show this (its split
//! keeps sending new records to the closed parent and never ends a closed
//! shard; see the fake's docs). Everything else of the source runs as on
//! moto: its lease loop, readers, ledger and checkpoints.

mod fake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use consumer_backend::{Acker, Envelope, Message, Outgoing, Publisher, Source};
use consumer_kinesis::lease::{Checkpoint, LeaseStore, MemoryLeaseStore};
use consumer_kinesis::{KinesisAcker, KinesisClient, KinesisPublisher, KinesisSource};

use fake::FakeKinesis;

const STREAM: &str = "orders";
const DEADLINE: Duration = Duration::from_secs(20);

type Store = Arc<MemoryLeaseStore>;
type Delivery = (Arc<Envelope>, KinesisAcker);

async fn publish(client: &KinesisClient, keys: &[String], from: u64, to: u64) {
    let batch: Vec<Outgoing> = (from..to)
        .flat_map(|n| {
            keys.iter().map(move |k| Outgoing {
                destination: STREAM.to_owned(),
                message: Message::json("OrderChanged", &serde_json::json!({"n": n}))
                    .expect("JSON")
                    .with_key(k.clone()),
            })
        })
        .collect();
    let publisher = KinesisPublisher::builder(client.clone()).build();
    let results = publisher.publish(&batch).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

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

fn n_of(e: &Envelope) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&e.payload).expect("JSON payload");
    v["n"].as_u64().expect("an n")
}

fn shard_of(e: &Envelope) -> String {
    e.origin
        .position
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Acks `got`, noting each record's key and `n` in `order`.
async fn settle(got: Vec<Delivery>, order: &mut Vec<(String, u64)>) {
    for (e, acker) in got {
        order.push((e.key.clone().unwrap_or_default(), n_of(&e)));
        acker.ack().await.expect("ack");
    }
}

async fn eventually_ended(store: &Store, shard: &str) {
    let deadline = Instant::now() + DEADLINE;
    while store.checkpoint_of(shard).await.expect("in memory") != Some(Checkpoint::ShardEnd) {
        assert!(Instant::now() < deadline, "{shard} checkpointed to its end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_then_a_merge_mid_stream_keep_each_keys_order() {
    let fake = Arc::new(FakeKinesis::new(STREAM));
    let client = KinesisClient::from_api(Arc::clone(&fake) as _);
    let keys: Vec<String> = (0..8).map(|i| format!("order-{i}")).collect();
    let store = Store::default();
    let mut source = KinesisSource::builder(client.clone(), STREAM, Arc::clone(&store))
        .with_lease_duration(Duration::from_secs(1))
        .with_poll_interval(Duration::from_millis(200))
        .with_checkpoint_interval(Duration::from_millis(20))
        .connect()
        .await
        .expect("a source");
    let stats = source.stats();
    let mut order = Vec::new();

    // Before the split: 40 records in the one shard, 20 of them read.
    publish(&client, &keys, 0, 5).await;
    settle(recv_n(&mut source, 20).await, &mut order).await;
    let (left, right) = fake.split("shardId-000000000000");
    publish(&client, &keys, 5, 10).await;
    // The parent's other 20 come first; its last one is held unsettled.
    let mut rest = recv_n(&mut source, 20).await;
    assert!(
        rest.iter()
            .all(|(e, _)| shard_of(e) == "shardId-000000000000")
    );
    let last = rest.pop().expect("twenty");
    settle(rest, &mut order).await;
    let early = tokio::time::timeout(Duration::from_millis(1500), source.recv()).await;
    assert!(
        early.is_err(),
        "no child record while a parent record is unsettled: {early:?}"
    );
    settle(vec![last], &mut order).await;
    let children = recv_n(&mut source, 40).await;
    assert!(
        children
            .iter()
            .all(|(e, _)| [&left, &right].contains(&&shard_of(e)))
    );
    settle(children, &mut order).await;
    eventually_ended(&store, "shardId-000000000000").await;

    // A merge of the two children: their records first, then the child's.
    let merged = fake.merge(&left, &right);
    publish(&client, &keys, 10, 15).await;
    let got = recv_n(&mut source, 40).await;
    assert!(got.iter().all(|(e, _)| shard_of(e) == merged));
    settle(got, &mut order).await;
    eventually_ended(&store, &left).await;
    eventually_ended(&store, &right).await;

    for key in &keys {
        let ns: Vec<u64> = order
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(
            ns,
            (0..15).collect::<Vec<_>>(),
            "{key} across a split and a merge"
        );
    }
    let s = stats.snapshot();
    assert_eq!(s.shards_ended, 3, "{s:?}");
    let leases = store.leases().await.expect("in memory");
    for finished in ["shardId-000000000000", left.as_str(), right.as_str()] {
        let lease = leases
            .iter()
            .find(|l| l.shard_id == finished)
            .expect("a lease per shard");
        assert_eq!(lease.owner, None, "{finished}'s lease ended");
    }
    source.close().await;
}
