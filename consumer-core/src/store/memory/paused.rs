//! Paused handlers in process memory (see
//! [`paused`](crate::store::paused)), under the store's one lock.

use super::MemoryStore;
use crate::error::Error;
use crate::store::paused::{Pause, PausedHandler, PausedHandlers};

impl PausedHandlers for MemoryStore {
    async fn pause(&self, handler: &str, by: &str, reason: &str) -> Result<Pause, Error> {
        let mut state = self.lock();
        if state.paused.contains_key(handler) {
            return Ok(Pause::AlreadyPaused);
        }
        state.paused.insert(
            handler.to_owned(),
            PausedHandler {
                handler: handler.to_owned(),
                by: by.to_owned(),
                reason: reason.to_owned(),
                since: crate::store::clock::now(),
            },
        );
        Ok(Pause::Paused)
    }

    async fn resume(&self, handler: &str) -> Result<bool, Error> {
        Ok(self.lock().paused.remove(handler).is_some())
    }

    async fn paused_handlers(&self) -> Result<Vec<PausedHandler>, Error> {
        Ok(self.lock().paused.values().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use crate::store::MemoryStore;
    use crate::store::paused::{EVERY_HANDLER, Pause, PausedHandlers, pause_of};

    #[tokio::test]
    async fn a_pause_is_listed_until_resumed_and_the_first_pause_stays() {
        let store = MemoryStore::new();
        assert_eq!(
            store.pause("orders", "ana", "db migration").await.ok(),
            Some(Pause::Paused)
        );
        assert_eq!(
            store.pause("orders", "bo", "again").await.ok(),
            Some(Pause::AlreadyPaused)
        );
        let paused = store.paused_handlers().await.unwrap_or_default();
        assert_eq!(paused.len(), 1);
        assert_eq!(
            (paused[0].by.as_str(), paused[0].reason.as_str()),
            ("ana", "db migration")
        );
        assert_eq!(store.resume("orders").await.ok(), Some(true));
        assert_eq!(store.resume("orders").await.ok(), Some(false));
        assert!(store.paused_handlers().await.unwrap_or_default().is_empty());
    }

    #[tokio::test]
    async fn a_pause_of_every_handler_stops_each_one() {
        let store = MemoryStore::new();
        let _ = store.pause(EVERY_HANDLER, "ana", "incident").await;
        let paused = store.paused_handlers().await.unwrap_or_default();
        assert_eq!(
            pause_of(&paused, "billing").map(|p| p.handler.as_str()),
            Some("*")
        );
        assert_eq!(
            store.resume("billing").await.ok(),
            Some(false),
            "its own pause only"
        );
    }
}
