//! The consumer's context: rebalance callbacks (assign, revoke with a
//! bounded wait and a final commit), statistics, librdkafka's logs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use consumer_backend::observe::{Commit, Happened, Revoke};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::ledger::{Ledger, Partition, State, Tp};

/// The consumer's context: rebalance callbacks (run on the poll thread),
/// statistics and librdkafka's logs.
pub(super) struct Ctx {
    shared: Arc<Ledger>,
    revoke_timeout: Duration,
    /// The group, named in the log line of a lost broker connection.
    group: String,
    /// Each broker handle's disconnect count at the last statistics: the
    /// counts are per handle, and handles come and go (bootstrap ones), so
    /// only increases are added up.
    disconnects: Mutex<HashMap<String, i64>>,
}

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        crate::tracing_context::log("consumer", level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "consumer::kafka", %error, reason, "client error (librdkafka retries by itself)");
    }

    fn stats(&self, statistics: Statistics) {
        self.count_disconnects(&statistics);
        let mut state = self.shared.lock();
        for (tp, p) in &mut state.partitions {
            if let Some(s) = statistics
                .topics
                .get(&*tp.topic)
                .and_then(|t| t.partitions.get(&tp.partition))
            {
                if s.hi_offset >= 0 {
                    p.high_watermark = Some(s.hi_offset);
                }
                if s.committed_offset >= 0 {
                    p.committed = Some(s.committed_offset);
                }
            }
        }
    }
}

impl ConsumerContext for Ctx {
    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        // Auto-commits only (librdkafka reports the others to their caller).
        if let Err(e) = &result {
            if matches!(
                e,
                KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)
            ) {
                // Nothing new to commit.
                return;
            }
            self.shared.observer.emit(Happened::CommitFailed {
                commit: Commit::Auto {
                    offsets: offsets.count(),
                },
                error: e,
            });
        }
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let mut state = self.shared.lock();
                for e in tpl.elements() {
                    state.next_epoch += 1;
                    let tp = Tp {
                        topic: Arc::from(e.topic()),
                        partition: e.partition(),
                    };
                    let epoch = state.next_epoch;
                    state.partitions.insert(tp, Partition::new(epoch));
                }
                drop(state);
                self.shared.observer.emit(Happened::Assigned {
                    partitions: tpl.count(),
                });
            }
            Rebalance::Revoke(tpl) => {
                self.shared.observer.emit(Happened::Revoking {
                    partitions: tpl.count(),
                });
                self.revoke(consumer, tpl);
            }
            Rebalance::Error(e) => {
                tracing::warn!(target: "consumer::kafka", error = %e, "rebalance error");
            }
        }
    }
}

impl Ctx {
    pub(super) fn new(shared: Arc<Ledger>, revoke_timeout: Duration, group: String) -> Self {
        Self {
            shared,
            revoke_timeout,
            group,
            disconnects: Mutex::default(),
        }
    }

    /// Adds the broker connections lost since the last statistics to the
    /// source's count, with a log line naming the brokers. librdkafka
    /// reconnects by itself; this is how the application hears of it.
    fn count_disconnects(&self, statistics: &Statistics) {
        let mut seen = self
            .disconnects
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut lost = 0u64;
        let mut brokers = Vec::new();
        for (name, broker) in &statistics.brokers {
            // Logical handles (the group coordinator) share a real
            // broker's connection: counting them would count it twice.
            if broker.source == "logical" || broker.source == "internal" {
                continue;
            }
            let now = broker.disconnects.unwrap_or(0);
            let before = seen.insert(name.clone(), now).unwrap_or(0);
            if now > before {
                lost += u64::try_from(now - before).unwrap_or(0);
                brokers.push(name.as_str());
            }
        }
        if lost > 0 {
            self.shared.observer.emit(Happened::BrokersDisconnected {
                group: &self.group,
                brokers: &brokers,
                lost,
            });
        }
    }

    /// Waits, up to the revoke timeout, until the records taken from the
    /// revoked partitions have settled, so that their offsets are committed
    /// before another member gets the partitions.
    fn wait_until_settled<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        targets: &[Tp],
    ) -> MutexGuard<'a, State> {
        // A timeout past what the clock can count is no deadline, not a
        // panic on the poll thread.
        let deadline = Instant::now().checked_add(self.revoke_timeout);
        let held = |s: &State| {
            targets
                .iter()
                .filter_map(|tp| s.partitions.get(tp))
                .map(|p| p.taken)
                .sum::<usize>()
        };
        while held(&state) > 0 {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                self.shared.observer.emit(Happened::RevokeTimedOut {
                    held: held(&state),
                    timeout: self.revoke_timeout,
                });
                break;
            }
            let settled = &self.shared.settled;
            state = match left {
                Some(left) => {
                    settled
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => settled.wait(state).unwrap_or_else(PoisonError::into_inner),
            };
        }
        state
    }

    fn revoke(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let lost = consumer.assignment_lost();
        let targets: Vec<Tp> = tpl
            .elements()
            .iter()
            .map(|e| Tp {
                topic: Arc::from(e.topic()),
                partition: e.partition(),
            })
            .collect();
        let mut state = self.shared.lock();
        for tp in &targets {
            if let Some(p) = state.partitions.get_mut(tp) {
                p.revoking = true;
                p.parked = None;
            }
        }
        if !lost {
            state = self.wait_until_settled(state, &targets);
        }
        let mut commit = TopicPartitionList::new();
        for tp in &targets {
            if let Some(p) = state.partitions.remove(tp)
                && let Some(pos) = p.position()
                && p.stored.is_none_or(|s| s <= pos)
            {
                let _ = commit.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(pos));
            }
        }
        drop(state);
        if lost {
            self.shared.observer.emit(Happened::Revoked {
                partitions: targets.len(),
                how: Revoke::Lost,
            });
            return;
        }
        if self.shared.closing.load(Ordering::SeqCst) {
            // Leaving the group on close: the final commit already covered
            // these positions (or could not reach the coordinator, and a
            // second attempt would wait another `session.timeout.ms`).
            self.shared.observer.emit(Happened::Revoked {
                partitions: targets.len(),
                how: Revoke::OnClose,
            });
            return;
        }
        if commit.count() > 0 {
            if let Err(e) = consumer.store_offsets(&commit) {
                tracing::debug!(target: "consumer::kafka", error = %e, "could not store final offsets");
            }
            if let Err(e) = consumer.commit(&commit, CommitMode::Sync) {
                self.shared.observer.emit(Happened::CommitFailed {
                    commit: Commit::Revoke,
                    error: &e,
                });
            }
        }
        self.shared.observer.emit(Happened::Revoked {
            partitions: targets.len(),
            how: Revoke::Committed,
        });
    }
}
