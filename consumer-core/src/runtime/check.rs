//! What a consumer refuses before its first delivery: what could only fail
//! at run time (a limit naming no handler, a codec a handler needs and the
//! consumer lacks, a retry window longer than the store remembers, a retry
//! mode the source cannot serve).

use super::Consumer;
use crate::error::Error;
use crate::handler::Handler;
use crate::router::Routes;
use crate::source::Source;
use crate::store::DedupStore;

impl<Src, S, R> Consumer<Src, S, R>
where
    Src: Source,
    S: DedupStore,
    R: Routes<S>,
{
    /// Refuses, before the first delivery, what could only fail at run
    /// time; tells the source every handler's retry policy.
    pub(super) fn check(&mut self) -> Result<(), Error> {
        let handlers = self.routes.handlers();
        if let Some((name, _)) = self
            .limits
            .iter()
            .find(|(name, _)| !handlers.iter().any(|h| h.name() == *name))
        {
            return Err(Error::Config(format!(
                "`with_handler_limit` names the handler `{name}`, which this consumer does not run"
            )));
        }
        if let Some(need) = handlers
            .iter()
            .filter_map(|h| h.codec())
            .find(|need| !self.codecs.has(*need))
        {
            return Err(Error::Config(format!(
                "a handler decodes with the {} codec (`{}`), and this consumer has none: add it with `with_codec`",
                need.name(),
                need.type_name()
            )));
        }
        for handler in self.routes.handlers() {
            for policy in handler.retry_policies() {
                if self.store.retention() <= policy.max_window() {
                    return Err(Error::RetentionTooShort {
                        handler: handler.name().to_owned(),
                        retention: self.store.retention(),
                        window: policy.max_window(),
                    });
                }
                self.source.accept_retry_policy(&policy).map_err(|reason| {
                    Error::RetryUnsupported {
                        handler: handler.name().to_owned(),
                        system: self.source.system(),
                        reason,
                    }
                })?;
            }
        }
        Ok(())
    }
}
