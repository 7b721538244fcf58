//! The ledger of messages this source received and has not settled:
//! which ones are waiting to be handed out, which one of each group is
//! out, when each one's visibility ends, and how often this source itself
//! gave a message back.
//!
//! * **Gating by group.** While some handler retries by visibility
//!   ([`RetryMode::Redeliver`](consumer_backend::RetryMode)), only
//!   one message of a group is out at a time: the next one waits here
//!   until the one before is settled. When the one out is retried by
//!   visibility, the group's waiting messages are given back (visibility
//!   0) without running, and SQS keeps the group blocked behind the
//!   retried one. Without such a handler every message is handed out at
//!   once, and the runtime's per-key lanes keep the order.
//! * **Releases.** SQS counts every receive in `ApproximateReceiveCount`,
//!   a release included; the ledger remembers how often it gave each
//!   message back, so a message released for its group is not charged an
//!   attempt for it when it comes back here.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use consumer_backend::Envelope;

/// One message received and not settled.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) receipt: String,
    pub(super) message_id: String,
    /// What gates it: the FIFO group, or the key.
    pub(super) group: Option<String>,
    /// Its `MessageGroupId`, for its dead letter.
    pub(super) group_id: Option<String>,
    pub(super) received: Instant,
    pub(super) visible_until: Instant,
    /// Waiting to be handed out (taken when it is).
    pub(super) envelope: Option<Arc<Envelope>>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    next: u64,
    entries: HashMap<u64, Entry>,
    /// Waiting messages in receive order.
    waiting: VecDeque<u64>,
    /// Groups with a message out (gating only).
    busy: HashMap<String, u64>,
    pub(super) gate: bool,
    releases: HashMap<String, (u32, Instant)>,
}

/// How long the ledger remembers a release.
const RELEASE_MEMORY: Duration = Duration::from_secs(3600);

impl Ledger {
    /// Received and not settled.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Waiting to be handed out.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// How often this source released `message_id` (within the last hour).
    pub(super) fn releases_of(&self, message_id: &str) -> u32 {
        self.releases.get(message_id).map_or(0, |(n, _)| *n)
    }

    pub(super) fn add(&mut self, entry: Entry) -> u64 {
        self.next += 1;
        let token = self.next;
        self.entries.insert(token, entry);
        self.waiting.push_back(token);
        token
    }

    /// The first waiting message whose group has none out: its token,
    /// envelope, receipt handle, group and when it was received.
    #[allow(clippy::type_complexity, reason = "one caller destructures it at once")]
    pub(super) fn take_ready(
        &mut self,
    ) -> Option<(u64, Arc<Envelope>, String, Option<String>, Instant)> {
        let pos = self.waiting.iter().position(|t| {
            !self.gate
                || self
                    .entries
                    .get(t)
                    .and_then(|e| e.group.as_ref())
                    .is_none_or(|g| !self.busy.contains_key(g))
        })?;
        let token = self.waiting.remove(pos)?;
        let entry = self.entries.get_mut(&token)?;
        let envelope = entry.envelope.take()?;
        if self.gate
            && let Some(g) = &entry.group
        {
            self.busy.insert(g.clone(), token);
        }
        Some((
            token,
            envelope,
            entry.receipt.clone(),
            entry.group_id.clone(),
            entry.received,
        ))
    }

    /// The message is settled (deleted, or given back): it leaves, and
    /// its group may hand out the next one.
    pub(super) fn remove(&mut self, token: u64) -> Option<Entry> {
        let entry = self.entries.remove(&token)?;
        if let Some(g) = &entry.group
            && self.busy.get(g) == Some(&token)
        {
            self.busy.remove(g);
        }
        self.waiting.retain(|t| *t != token);
        Some(entry)
    }

    /// SQS's id of a held message.
    pub(super) fn message_id(&self, token: u64) -> Option<String> {
        self.entries.get(&token).map(|e| e.message_id.clone())
    }

    /// An extension failed: the message is due again at the next tick.
    pub(super) fn expire_now(&mut self, token: u64) {
        if let Some(e) = self.entries.get_mut(&token) {
            e.visible_until = Instant::now();
        }
    }

    /// Remembers that this source gave `message_id` back.
    pub(super) fn count_release(&mut self, message_id: &str) {
        let now = Instant::now();
        if self.releases.len() > 10_000 {
            self.releases
                .retain(|_, (_, at)| now.duration_since(*at) < RELEASE_MEMORY);
        }
        let e = self
            .releases
            .entry(message_id.to_owned())
            .or_insert((0, now));
        e.0 += 1;
        e.1 = now;
    }

    /// The message was retried by visibility: it leaves, and so do the
    /// waiting messages of its group, whose receipts are returned to be
    /// released without running.
    pub(super) fn park(&mut self, token: u64) -> Vec<String> {
        let Some(entry) = self.remove(token) else {
            return Vec::new();
        };
        let Some(group) = entry.group.filter(|_| self.gate) else {
            return Vec::new();
        };
        let siblings: Vec<u64> = self
            .waiting
            .iter()
            .copied()
            .filter(|t| self.entries.get(t).and_then(|e| e.group.as_ref()) == Some(&group))
            .collect();
        let mut receipts = Vec::new();
        for t in siblings {
            if let Some(e) = self.remove(t) {
                self.count_release(&e.message_id);
                receipts.push(e.receipt);
            }
        }
        receipts
    }

    /// Every waiting message, removed (shutdown): their receipts.
    pub(super) fn drain_waiting(&mut self) -> Vec<String> {
        let tokens: Vec<u64> = self.waiting.drain(..).collect();
        tokens
            .into_iter()
            .filter_map(|t| self.entries.remove(&t))
            .map(|e| e.receipt)
            .collect()
    }

    /// The messages whose visibility ends within `margin`, each with the
    /// timeout to set (at most `visibility`, never past `cap` from its
    /// receive); their deadlines move as if the extension succeeded.
    pub(super) fn due_for_extension(
        &mut self,
        now: Instant,
        margin: Duration,
        visibility: Duration,
        cap: Duration,
    ) -> Vec<(u64, String, i32)> {
        let mut due = Vec::new();
        for (token, e) in &mut self.entries {
            if e.visible_until.saturating_duration_since(now) > margin {
                continue;
            }
            let left = cap.saturating_sub(now.duration_since(e.received));
            let next = visibility.min(left);
            if next < Duration::from_secs(1) {
                continue;
            }
            e.visible_until = now + next;
            due.push((*token, e.receipt.clone(), secs(next)));
        }
        due
    }
}

/// Whole seconds, as SQS takes them, rounded up (a delay is never cut
/// short), at most `i32::MAX`.
pub(crate) fn secs(d: Duration) -> i32 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(s).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use consumer_backend::{Headers, Origin};

    fn entry(group: &str, id: &str) -> Entry {
        Entry {
            receipt: format!("r-{id}"),
            message_id: id.to_owned(),
            group: Some(group.to_owned()),
            group_id: Some(group.to_owned()),
            received: Instant::now(),
            visible_until: Instant::now() + Duration::from_secs(30),
            envelope: Some(Arc::new(Envelope::from_parts(
                Bytes::new(),
                Headers::new(),
                Some(group.to_owned()),
                Origin::default(),
                || id.to_owned(),
            ))),
        }
    }

    #[test]
    fn with_the_gate_one_message_per_group_is_out_and_a_park_releases_its_group() {
        let mut l = Ledger {
            gate: true,
            ..Ledger::default()
        };
        for (g, id) in [("a", "a1"), ("a", "a2"), ("b", "b1"), ("a", "a3")] {
            l.add(entry(g, id));
        }
        let (a1, env, ..) = l.take_ready().expect("a1");
        assert_eq!(env.id, "a1");
        let (b1, env, ..) = l.take_ready().expect("b1");
        assert_eq!(env.id, "b1");
        assert!(l.take_ready().is_none(), "a2 waits for a1");
        l.remove(b1);
        assert_eq!(
            l.park(a1),
            ["r-a2", "r-a3"],
            "the rest of group a goes back"
        );
        assert_eq!(l.releases_of("a2"), 1);
        assert_eq!(l.len(), 0);
    }

    #[test]
    fn without_the_gate_every_message_is_handed_out_in_order() {
        let mut l = Ledger::default();
        for (g, id) in [("a", "a1"), ("a", "a2")] {
            l.add(entry(g, id));
        }
        let ids: Vec<String> =
            std::iter::from_fn(|| l.take_ready().map(|t| t.1.id.clone())).collect();
        assert_eq!(ids, ["a1", "a2"]);
    }

    #[test]
    fn extensions_stop_at_the_cap_from_the_receive() {
        let mut l = Ledger::default();
        let t = l.add(entry("a", "a1"));
        let now = Instant::now() + Duration::from_secs(25);
        let due = l.due_for_extension(
            now,
            Duration::from_secs(10),
            Duration::from_secs(30),
            Duration::from_secs(40),
        );
        assert_eq!(due.len(), 1);
        assert_eq!(
            (due[0].0, due[0].2),
            (t, 15),
            "40 s from the receive at most"
        );
        assert_eq!(secs(Duration::from_millis(1)), 1);
        assert_eq!(secs(Duration::ZERO), 0);
    }
}
