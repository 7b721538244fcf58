//! Held keys in process memory: the same transitions as the tables'
//! (see [`held`](crate::store::held)), under the store's one lock.

use std::collections::BTreeMap;
use std::time::Duration;

use time::OffsetDateTime;
use tokio::time::Instant;

use super::{MemoryStore, slot};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::store::held::{
    HeldCount, HeldKey, HeldKeys, HoldStatus, Holding, NextParked, Parked, Release,
};

/// One held key.
#[derive(Debug)]
pub(super) struct Hold {
    handler: String,
    key: String,
    head: String,
    reason: String,
    status: HoldStatus,
    next_seq: i64,
    drainer: Option<(String, Instant)>,
    held_at: OffsetDateTime,
    parked: BTreeMap<i64, Parked>,
}

impl Hold {
    fn park(&mut self, seq: i64, envelope: &Envelope) {
        if self.parked.values().any(|p| p.message_id == envelope.id) {
            return;
        }
        self.parked.insert(
            seq,
            Parked {
                seq,
                message_id: envelope.id.clone(),
                destination: envelope.origin.channel.to_string(),
                position: envelope.origin.position.to_string(),
                headers: envelope.headers.clone(),
                payload: envelope.payload.clone(),
            },
        );
    }

    fn drained_by(&self, drainer: &str) -> bool {
        self.status == HoldStatus::Draining
            && self.drainer.as_ref().is_some_and(|(d, _)| d == drainer)
    }

    fn takeable(&self, now: Instant) -> bool {
        match self.status {
            HoldStatus::Released => true,
            HoldStatus::Draining => self.drainer.as_ref().is_none_or(|(_, until)| *until < now),
            HoldStatus::Held => false,
        }
    }
}

impl HeldKeys for MemoryStore {
    async fn park_if_held(
        &self,
        handler: &str,
        key: &str,
        envelope: &Envelope,
    ) -> Result<bool, Error> {
        let mut state = self.lock();
        let Some(hold) = state.holds.get_mut(&slot(handler, key)) else {
            return Ok(false);
        };
        let seq = hold.next_seq;
        hold.next_seq += 1;
        hold.park(seq, envelope);
        Ok(true)
    }

    async fn hold_key(
        &self,
        handler: &str,
        key: &str,
        envelope: &Envelope,
        reason: &str,
        how: Holding,
    ) -> Result<(), Error> {
        let mut state = self.lock();
        let at = slot(handler, key);
        if how == Holding::Redelivered && state.holds.contains_key(&at) {
            return Ok(());
        }
        let hold = state.holds.entry(at).or_insert_with(|| Hold {
            handler: handler.to_owned(),
            key: key.to_owned(),
            head: String::new(),
            reason: String::new(),
            status: HoldStatus::Held,
            next_seq: 0,
            drainer: None,
            held_at: OffsetDateTime::now_utc(),
            parked: BTreeMap::new(),
        });
        hold.head.clone_from(&envelope.id);
        reason.clone_into(&mut hold.reason);
        hold.status = HoldStatus::Held;
        hold.drainer = None;
        let seq = hold.next_seq;
        hold.next_seq += 1;
        hold.park(seq, envelope);
        Ok(())
    }

    async fn take_released(
        &self,
        handler: &str,
        drainer: &str,
        lease: Duration,
    ) -> Result<Option<String>, Error> {
        let now = Instant::now();
        let mut state = self.lock();
        let hold = state
            .holds
            .values_mut()
            .filter(|h| h.handler == handler && h.takeable(now))
            .min_by_key(|h| h.held_at);
        Ok(hold.map(|h| {
            h.status = HoldStatus::Draining;
            h.drainer = Some((drainer.to_owned(), now + lease));
            h.key.clone()
        }))
    }

    async fn next_parked(
        &self,
        handler: &str,
        key: &str,
        drainer: &str,
        lease: Duration,
    ) -> Result<NextParked, Error> {
        let mut state = self.lock();
        let Some(hold) = state.holds.get_mut(&slot(handler, key)) else {
            return Ok(NextParked::NotOurs);
        };
        if !hold.drained_by(drainer) {
            return Ok(NextParked::NotOurs);
        }
        hold.drainer = Some((drainer.to_owned(), Instant::now() + lease));
        Ok(match hold.parked.values().next() {
            Some(p) => NextParked::Message(p.clone()),
            None => NextParked::Empty {
                next_seq: hold.next_seq,
            },
        })
    }

    async fn unpark(&self, handler: &str, key: &str, message_id: &str) -> Result<(), Error> {
        let mut state = self.lock();
        if let Some(hold) = state.holds.get_mut(&slot(handler, key))
            && !(hold.status == HoldStatus::Held && hold.head == message_id)
        {
            hold.parked.retain(|_, p| p.message_id != message_id);
        }
        Ok(())
    }

    async fn finish_hold(
        &self,
        handler: &str,
        key: &str,
        drainer: &str,
        next_seq: i64,
    ) -> Result<bool, Error> {
        let mut state = self.lock();
        let at = slot(handler, key);
        let ends = state
            .holds
            .get(&at)
            .is_some_and(|h| h.drained_by(drainer) && h.next_seq == next_seq);
        if ends {
            state.holds.remove(&at);
        }
        Ok(ends)
    }

    async fn held_keys(
        &self,
        handler: Option<&str>,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Vec<HeldKey>, Error> {
        let state = self.lock();
        let mut keys: Vec<HeldKey> = state
            .holds
            .values()
            .filter(|h| handler.is_none_or(|name| h.handler == name))
            .filter(|h| after.is_none_or(|a| (h.handler.as_str(), h.key.as_str()) > a))
            .map(|h| HeldKey {
                handler: h.handler.clone(),
                key: h.key.clone(),
                head_message_id: h.head.clone(),
                reason: h.reason.clone(),
                status: h.status,
                parked: u64::try_from(h.parked.len()).unwrap_or(u64::MAX),
                held_at: h.held_at,
            })
            .collect();
        keys.sort_by(|a, b| (&a.handler, &a.key).cmp(&(&b.handler, &b.key)));
        keys.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(keys)
    }

    async fn held_count(&self, handler: &str) -> Result<HeldCount, Error> {
        let state = self.lock();
        let held = state
            .holds
            .values()
            .filter(|h| h.handler == handler && h.status == HoldStatus::Held);
        Ok(held.fold(HeldCount::default(), |count, h| HeldCount {
            held: count.held + 1,
            oldest: Some(count.oldest.map_or(h.held_at, |o| o.min(h.held_at))),
        }))
    }

    async fn release_key(
        &self,
        handler: &str,
        key: &str,
        skip_head: bool,
    ) -> Result<Release, Error> {
        let mut state = self.lock();
        let Some(hold) = state.holds.get_mut(&slot(handler, key)) else {
            return Ok(Release::NotHeld);
        };
        if hold.status != HoldStatus::Held {
            return Ok(Release::NotHeld);
        }
        hold.status = HoldStatus::Released;
        let head = hold.head.clone();
        if skip_head {
            hold.parked.retain(|_, p| p.message_id != head);
        } else {
            state.attempts.remove(&slot(handler, &head));
        }
        Ok(Release::Released)
    }
}
