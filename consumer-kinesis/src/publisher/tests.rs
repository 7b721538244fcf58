//! The publisher against a fake Kinesis that refuses records on cue: what
//! moto cannot do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use consumer_backend::{Message, Outgoing, Publisher, RetryPolicy};

use super::*;
use crate::client::{ApiFuture, IteratorStart, RecordsPage};
use crate::shards::ShardInfo;

/// Stores records per partition key, refusing each record whose payload is
/// listed for as many calls as listed, and counting the calls.
#[derive(Default)]
struct Flaky {
    refuse: Mutex<HashMap<Vec<u8>, (u32, &'static str)>>,
    stored: Mutex<Vec<(String, Vec<u8>)>>,
    calls: Mutex<Vec<Vec<String>>>,
}

impl KinesisApi for Flaky {
    fn put_records<'a>(
        &'a self,
        _stream: &'a str,
        entries: Vec<PutEntry>,
    ) -> ApiFuture<'a, Vec<PutOutcome>> {
        Box::pin(async move {
            let keys = entries.iter().map(|e| e.partition_key.clone()).collect();
            self.calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(keys);
            let mut refuse = self.refuse.lock().unwrap_or_else(PoisonError::into_inner);
            let mut stored = self.stored.lock().unwrap_or_else(PoisonError::into_inner);
            Ok(entries
                .into_iter()
                .map(|e| {
                    let payload = envelope::decode(&e.data, &e.partition_key)
                        .expect("the publisher writes envelopes this crate reads")
                        .payload
                        .to_vec();
                    match refuse.get_mut(&payload) {
                        Some((left, code)) if *left > 0 => {
                            *left -= 1;
                            PutOutcome::Failed {
                                code: (*code).to_owned(),
                                message: "injected".to_owned(),
                            }
                        }
                        _ => {
                            stored.push((e.partition_key, payload));
                            PutOutcome::Stored {
                                shard_id: "shardId-000000000000".to_owned(),
                                sequence_number: stored.len().to_string(),
                            }
                        }
                    }
                })
                .collect())
        })
    }

    fn list_shards<'a>(&'a self, _stream: &'a str) -> ApiFuture<'a, Vec<ShardInfo>> {
        Box::pin(async { Err(unused("ListShards")) })
    }

    fn shard_iterator<'a>(
        &'a self,
        _stream: &'a str,
        _shard_id: &'a str,
        _start: &'a IteratorStart,
    ) -> ApiFuture<'a, String> {
        Box::pin(async { Err(unused("GetShardIterator")) })
    }

    fn get_records<'a>(&'a self, _iterator: &'a str, _limit: i32) -> ApiFuture<'a, RecordsPage> {
        Box::pin(async { Err(unused("GetRecords")) })
    }
}

/// The publisher makes no read call.
fn unused(operation: &str) -> ApiError {
    ApiError::new(
        BrokerErrorKind::Fatal,
        format!("{operation}: not served by this fake"),
    )
}

fn publisher(api: Arc<Flaky>, attempts: u32) -> KinesisPublisher {
    KinesisPublisher::builder(KinesisClient::from_api(api))
        .with_record_retry(RetryPolicy::exponential(
            Duration::from_millis(1),
            Duration::from_millis(5),
            attempts,
        ))
        .build()
}

fn batch(keys: &[&str], per_key: usize) -> Vec<Outgoing> {
    (0..per_key)
        .flat_map(|n| {
            keys.iter().map(move |k| Outgoing {
                destination: "orders".to_owned(),
                message: Message::raw(format!("{k}-{n}").into_bytes())
                    .with_key(*k)
                    .with_header("ce_id", format!("{k}-{n}")),
            })
        })
        .collect()
}

fn stored_by_key(api: &Flaky) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for (key, payload) in api
        .stored
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        out.entry(key.clone())
            .or_default()
            .push(String::from_utf8_lossy(payload).into_owned());
    }
    out
}

#[tokio::test]
async fn throttled_records_are_sent_again_and_each_key_keeps_its_order() {
    let api = Arc::new(Flaky::default());
    {
        let mut refuse = api.refuse.lock().unwrap_or_else(PoisonError::into_inner);
        let throttled = "ProvisionedThroughputExceededException";
        refuse.insert(b"a-0".to_vec(), (3, throttled));
        refuse.insert(b"b-2".to_vec(), (1, "InternalFailure"));
        refuse.insert(b"c-4".to_vec(), (2, throttled));
    }
    let results = publisher(Arc::clone(&api), 8)
        .publish(&batch(&["a", "b", "c"], 6))
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let stored = stored_by_key(&api);
    for key in ["a", "b", "c"] {
        let expected: Vec<String> = (0..6).map(|n| format!("{key}-{n}")).collect();
        assert_eq!(stored[key], expected, "key {key} in order");
    }
    for call in api
        .calls
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        let mut keys = call.clone();
        keys.sort();
        keys.dedup();
        assert_eq!(
            keys.len(),
            call.len(),
            "one record per key per call: {call:?}"
        );
    }
}

#[tokio::test]
async fn a_record_refused_for_good_holds_back_its_keys_later_records_only() {
    let api = Arc::new(Flaky::default());
    api.refuse
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            b"a-1".to_vec(),
            (u32::MAX, "ProvisionedThroughputExceededException"),
        );
    let batch = batch(&["a", "b"], 3);
    let results = publisher(Arc::clone(&api), 3).publish(&batch).await;
    let outcome: Vec<(String, bool)> = batch
        .iter()
        .zip(&results)
        .map(|(o, r)| {
            (
                String::from_utf8_lossy(&o.message.payload).into_owned(),
                r.is_ok(),
            )
        })
        .collect();
    assert_eq!(
        outcome,
        [
            ("a-0".to_owned(), true),
            ("b-0".to_owned(), true),
            ("a-1".to_owned(), false),
            ("b-1".to_owned(), true),
            ("a-2".to_owned(), false),
            ("b-2".to_owned(), true),
        ]
    );
    assert!(
        results[2]
            .as_ref()
            .is_err_and(consumer_backend::Error::is_retriable)
    );
    assert!(
        results[4]
            .as_ref()
            .is_err_and(consumer_backend::Error::is_retriable),
        "held back"
    );
    assert_eq!(stored_by_key(&api)["a"], ["a-0"]);
}

#[tokio::test]
async fn an_oversize_record_is_a_permanent_error_before_any_call() {
    let api = Arc::new(Flaky::default());
    let big = Outgoing {
        destination: "orders".to_owned(),
        message: Message::raw(vec![b'x'; MAX_RECORD_BYTES]).with_key("k"),
    };
    let results = publisher(Arc::clone(&api), 3).publish(&[big]).await;
    let error = results[0].as_ref().expect_err("over 1 MiB with its key");
    assert!(error.is_too_large() && !error.is_retriable(), "{error}");
    assert!(
        api.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    );
    let bad = Outgoing {
        destination: "no/such stream".to_owned(),
        message: Message::raw(&b"x"[..]),
    };
    let results = publisher(Arc::clone(&api), 3).publish(&[bad]).await;
    assert!(
        matches!(results[0], Err(consumer_backend::Error::Config(_))),
        "{results:?}"
    );
}
