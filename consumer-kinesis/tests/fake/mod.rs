//! An in-process Kinesis for what moto cannot show: resharding as Kinesis
//! does it. moto (5.x) keeps routing new records to a split parent (its
//! shard lookup does not skip closed shards), moves the parent's records
//! into the stream again on a split, and never ends a closed shard's
//! iterator, so a consumer cannot see a parent finish there.
//!
//! Here, as on Kinesis: a record goes to the open shard whose hash-key
//! range holds its partition key's hash (a stable 128-bit FNV digest here,
//! MD5 on Kinesis: which shard a key lands on is not what is tested); a
//! split or a merge closes the parents, which keep their records, and
//! opens children naming them; `GetRecords` on a closed shard read to its
//! end answers no next iterator. Sequence numbers grow across the stream.

use std::sync::{Mutex, PoisonError};

use consumer_backend::BrokerErrorKind;
use consumer_kinesis::client::{
    ApiError, ApiFuture, IteratorStart, KinesisApi, PutEntry, PutOutcome, ReadRecord, RecordsPage,
};
use consumer_kinesis::lease::Checkpoint;
use consumer_kinesis::shards::ShardInfo;

struct Shard {
    id: String,
    /// The hash-key range, inclusive.
    range: (u128, u128),
    parent: Option<String>,
    adjacent: Option<String>,
    open: bool,
    records: Vec<ReadRecord>,
}

#[derive(Default)]
struct State {
    shards: Vec<Shard>,
    next_sequence: u64,
}

/// One stream, kept in memory; see the module docs.
pub struct FakeKinesis {
    stream: String,
    state: Mutex<State>,
}

fn fnv(bytes: &[u8], seed: u64) -> u64 {
    bytes.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn hash(key: &str) -> u128 {
    let hi = fnv(key.as_bytes(), 0xcbf2_9ce4_8422_2325);
    let lo = fnv(key.as_bytes(), 0x8422_2325_cbf2_9ce4);
    (u128::from(hi) << 64) | u128::from(lo)
}

fn not_found(what: &str) -> ApiError {
    ApiError::service("ResourceNotFoundException", what.to_owned())
}

impl FakeKinesis {
    /// A stream named `stream` with one open shard over every hash key.
    pub fn new(stream: &str) -> Self {
        let state = State {
            shards: vec![Shard {
                id: "shardId-000000000000".to_owned(),
                range: (0, u128::MAX),
                parent: None,
                adjacent: None,
                open: true,
                records: Vec::new(),
            }],
            next_sequence: 1,
        };
        Self {
            stream: stream.to_owned(),
            state: Mutex::new(state),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open_child(
        state: &mut State,
        range: (u128, u128),
        parent: &str,
        adjacent: Option<&str>,
    ) -> String {
        let id = format!("shardId-{:012}", state.shards.len());
        state.shards.push(Shard {
            id: id.clone(),
            range,
            parent: Some(parent.to_owned()),
            adjacent: adjacent.map(str::to_owned),
            open: true,
            records: Vec::new(),
        });
        id
    }

    /// Splits open shard `id` in two at the middle of its range; the
    /// children's ids.
    pub fn split(&self, id: &str) -> (String, String) {
        let mut state = self.state();
        let shard = state
            .shards
            .iter_mut()
            .find(|s| s.id == id && s.open)
            .expect("an open shard to split");
        shard.open = false;
        let (lo, hi) = shard.range;
        let mid = lo + (hi - lo) / 2;
        let a = Self::open_child(&mut state, (lo, mid), id, None);
        let b = Self::open_child(&mut state, (mid + 1, hi), id, None);
        (a, b)
    }

    /// Merges open adjacent shards `a` (lower range) and `b`; the child's
    /// id.
    pub fn merge(&self, a: &str, b: &str) -> String {
        let mut state = self.state();
        let mut range = (u128::MAX, 0);
        for shard in state.shards.iter_mut().filter(|s| s.id == a || s.id == b) {
            assert!(shard.open, "{} is open", shard.id);
            shard.open = false;
            range = (range.0.min(shard.range.0), range.1.max(shard.range.1));
        }
        Self::open_child(&mut state, range, a, Some(b))
    }

    fn check(&self, stream: &str) -> Result<(), ApiError> {
        if stream == self.stream {
            Ok(())
        } else {
            Err(not_found(&format!("no stream {stream}")))
        }
    }
}

impl KinesisApi for FakeKinesis {
    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: Vec<PutEntry>,
    ) -> ApiFuture<'a, Vec<PutOutcome>> {
        Box::pin(async move {
            self.check(stream)?;
            let mut state = self.state();
            let mut out = Vec::with_capacity(entries.len());
            for entry in entries {
                let h = hash(&entry.partition_key);
                let sequence_number = state.next_sequence.to_string();
                state.next_sequence += 1;
                let shard = state
                    .shards
                    .iter_mut()
                    .find(|s| s.open && s.range.0 <= h && h <= s.range.1)
                    .ok_or_else(|| {
                        ApiError::new(BrokerErrorKind::Fatal, "no open shard for a key")
                    })?;
                shard.records.push(ReadRecord {
                    sequence_number: sequence_number.clone(),
                    partition_key: entry.partition_key,
                    data: entry.data,
                    arrival: Some(std::time::SystemTime::now()),
                });
                out.push(PutOutcome::Stored {
                    shard_id: shard.id.clone(),
                    sequence_number,
                });
            }
            Ok(out)
        })
    }

    fn list_shards<'a>(&'a self, stream: &'a str) -> ApiFuture<'a, Vec<ShardInfo>> {
        Box::pin(async move {
            self.check(stream)?;
            let state = self.state();
            Ok(state
                .shards
                .iter()
                .map(|s| ShardInfo {
                    id: s.id.clone(),
                    parent: s.parent.clone(),
                    adjacent_parent: s.adjacent.clone(),
                    ending_sequence_number: (!s.open).then(|| {
                        s.records
                            .last()
                            .map_or_else(|| "0".to_owned(), |r| r.sequence_number.clone())
                    }),
                })
                .collect())
        })
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard_id: &'a str,
        start: &'a IteratorStart,
    ) -> ApiFuture<'a, String> {
        Box::pin(async move {
            self.check(stream)?;
            let state = self.state();
            let shard = state
                .shards
                .iter()
                .find(|s| s.id == shard_id)
                .ok_or_else(|| not_found(shard_id))?;
            let position = match start {
                IteratorStart::TrimHorizon => 0,
                IteratorStart::Latest => shard.records.len(),
                IteratorStart::AfterSequence(seq) => {
                    let after = Checkpoint::At(seq.clone());
                    shard
                        .records
                        .iter()
                        .position(|r| {
                            Checkpoint::At(r.sequence_number.clone())
                                .position_cmp(&after)
                                .is_gt()
                        })
                        .unwrap_or(shard.records.len())
                }
            };
            Ok(format!("{shard_id}:{position}"))
        })
    }

    fn get_records<'a>(&'a self, iterator: &'a str, limit: i32) -> ApiFuture<'a, RecordsPage> {
        Box::pin(async move {
            let bad =
                || ApiError::service("InvalidArgumentException", "not an iterator of this fake");
            let (shard_id, position) = iterator.split_once(':').ok_or_else(bad)?;
            let position: usize = position.parse().map_err(|_| bad())?;
            let state = self.state();
            let shard = state
                .shards
                .iter()
                .find(|s| s.id == shard_id)
                .ok_or_else(|| not_found(shard_id))?;
            let limit = usize::try_from(limit).unwrap_or(1).max(1);
            let end = shard.records.len().min(position + limit);
            let records = shard
                .records
                .get(position..end)
                .unwrap_or_default()
                .to_vec();
            let at_end = end == shard.records.len();
            Ok(RecordsPage {
                records,
                next_iterator: (shard.open || !at_end).then(|| format!("{shard_id}:{end}")),
                millis_behind_latest: Some(if at_end { 0 } else { 1 }),
            })
        })
    }
}
