//! Which instances are alive, and which partitions each one takes.
//!
//! Every instance binds an exclusive queue of its own to the logical
//! queue's fanout members exchange and publishes a heartbeat there every
//! [`heartbeat`](super::PartitionedSourceBuilder::with_heartbeat) interval; an
//! instance not heard from for three intervals is gone, one that closes says
//! so. The partitions are dealt out over the live instances sorted by id:
//! partition `p` goes to the `(p mod M)`-th of `M`, so each takes
//! `⌊N/M⌋` or `⌈N/M⌉`. Views can differ for a moment (a heartbeat in
//! flight); that costs no safety, because every partition queue has a single
//! active consumer: a partition two instances both want is consumed by one
//! of them, until the other lets go.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, ExchangeKind};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::names::short;

/// How many heartbeat intervals of silence make an instance gone.
const MISSED_BEATS: u32 = 3;

/// A configured heartbeat interval within what works: at least 50 ms (the
/// broker round trip), at most an hour (a dead instance's partitions wait
/// three intervals; longer would also overflow the interval's arithmetic at
/// `Duration::MAX`).
pub(super) fn bounded_heartbeat(every: Duration) -> Duration {
    every.clamp(Duration::from_millis(50), Duration::from_secs(3600))
}

/// The partitions of `me` among `members` (sorted, deduplicated ids).
pub(super) fn assign(members: &[&str], me: &str, partitions: u32) -> Vec<u32> {
    let Some(rank) = members.iter().position(|m| *m == me) else {
        return Vec::new();
    };
    let m = u32::try_from(members.len()).unwrap_or(u32::MAX);
    let rank = u32::try_from(rank).unwrap_or(u32::MAX);
    (0..partitions).filter(|p| p % m == rank).collect()
}

/// How [`Membership::run`] ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// This instance said goodbye.
    Left,
    /// The heartbeats stopped, for the reason given: the others no longer
    /// hear this instance.
    Stopped(String),
}

/// The heartbeats' channel, exchange and queue, declared.
pub(super) struct Membership {
    channel: Channel,
    exchange: String,
    me: String,
    partitions: u32,
    heartbeat: Duration,
}

impl Membership {
    pub(super) async fn join(
        channel: Channel,
        exchange: String,
        me: String,
        partitions: u32,
        heartbeat: Duration,
    ) -> Result<(Self, lapin::Consumer)> {
        channel
            .exchange_declare(
                short(&exchange)?,
                ExchangeKind::Fanout,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(Error::declare("exchange", &exchange))?;
        let queue = channel
            .queue_declare(
                "".into(),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(Error::amqp("members queue declare"))?;
        channel
            .queue_bind(
                queue.name().clone(),
                short(&exchange)?,
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(Error::amqp("members queue bind"))?;
        let beats = channel
            .basic_consume(
                queue.name().clone(),
                "".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    exclusive: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(Error::amqp("members consume"))?;
        Ok((
            Self {
                channel,
                exchange,
                me,
                partitions,
                heartbeat,
            },
            beats,
        ))
    }

    /// Publishes `word` (`hb`, `bye`). A beat not written out within
    /// three intervals fails: the others count this instance gone by then,
    /// and a connection lost under the write may never answer it.
    async fn say(&self, word: &str) -> Result<()> {
        let body = format!("{word} {}", self.me);
        let gone_after = self.heartbeat.saturating_mul(MISSED_BEATS);
        let ttl = gone_after.as_millis().to_string();
        let publish = self.channel.basic_publish(
            short(&self.exchange)?,
            "".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default().with_expiration(short(&ttl)?),
        );
        tokio::time::timeout(gone_after, publish)
            .await
            .map_err(|_| Error::NoAnswer {
                what: "a heartbeat on the members exchange",
                name: self.exchange.clone(),
                after: gone_after,
            })?
            .map_err(Error::amqp("heartbeat publish"))?;
        Ok(())
    }

    /// Beats, listens, and sends this instance's partitions to `desired`
    /// whenever they change (the first time after one interval, once the
    /// others have been heard). Returns when `leave` is notified (after
    /// saying goodbye, with [`Ended::Left`]) or the heartbeats stop (with
    /// why): the source then ends its session and joins again, since an
    /// instance the others no longer hear has had its partitions dealt to
    /// them.
    pub(super) async fn run(
        self,
        mut beats: lapin::Consumer,
        desired: watch::Sender<Option<Vec<u32>>>,
        leave: std::sync::Arc<Notify>,
    ) -> Ended {
        let started = Instant::now();
        let mut seen: BTreeMap<String, Instant> = BTreeMap::new();
        let mut tick = tokio::time::interval(self.heartbeat);
        let gone_after = self.heartbeat.saturating_mul(MISSED_BEATS);
        loop {
            tokio::select! {
                biased;
                () = leave.notified() => {
                    let _ = self.say("bye").await;
                    return Ended::Left;
                }
                _ = tick.tick() => {
                    if let Err(e) = self.say("hb").await {
                        return Ended::Stopped(format!("a heartbeat could not be sent: {e}"));
                    }
                }
                beat = beats.next() => match beat {
                    Some(Ok(delivery)) => {
                        let text = String::from_utf8_lossy(&delivery.data);
                        match text.split_once(' ') {
                            Some(("hb", id)) => { seen.insert(id.to_owned(), Instant::now()); }
                            Some(("bye", id)) => { seen.remove(id); }
                            _ => tracing::debug!(target: "consumer::amqp", "ignored a malformed heartbeat"),
                        }
                    }
                    Some(Err(e)) => {
                        return Ended::Stopped(format!("the heartbeats' subscription failed: {e}"));
                    }
                    None => {
                        return Ended::Stopped("the broker ended the heartbeats' subscription".to_owned());
                    }
                },
            }
            let now = Instant::now();
            seen.retain(|_, at| now.duration_since(*at) < gone_after);
            if now.duration_since(started) < self.heartbeat {
                continue;
            }
            let mut members: Vec<&str> = seen.keys().map(String::as_str).collect();
            if !seen.contains_key(&self.me) {
                members.push(&self.me);
                members.sort_unstable();
            }
            let mine = assign(&members, &self.me, self.partitions);
            desired.send_if_modified(|current| {
                if current.as_ref() == Some(&mine) {
                    return false;
                }
                tracing::info!(target: "consumer::amqp", instance = %self.me, members = members.len(), partitions = ?mine, "partitions assigned");
                *current = Some(mine);
                true
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{assign, bounded_heartbeat};

    #[test]
    fn a_heartbeat_saturates_within_50_ms_and_an_hour() {
        assert_eq!(bounded_heartbeat(Duration::MAX), Duration::from_secs(3600));
        assert_eq!(bounded_heartbeat(Duration::ZERO), Duration::from_millis(50));
        assert_eq!(
            bounded_heartbeat(Duration::from_secs(2)),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn partitions_are_dealt_evenly_and_completely() {
        let members = ["a", "b", "c"];
        let all: Vec<Vec<u32>> = members.iter().map(|m| assign(&members, m, 8)).collect();
        assert_eq!(all, [vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]);
        assert_eq!(assign(&["a"], "a", 4), [0, 1, 2, 3]);
        assert!(assign(&["a"], "z", 4).is_empty(), "not a member: nothing");
        assert_eq!(
            assign(&["a", "b", "c", "d", "e"], "e", 2),
            Vec::<u32>::new(),
            "more instances than partitions: some idle"
        );
    }
}
