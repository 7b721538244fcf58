//! `held-keys list | release | skip`: the keys sequenced dead letters hold
//! (`#[handler(on_dead_letter = hold_key)]`), and the two ways to let one
//! go on (the store's [`HeldKeys`]).
//!
//! `release` forgets the head's failures and lets the consumer drain the
//! key: the head runs first with its whole retry policy, then each message
//! parked behind it, in order; a head that fails again holds the key
//! again. `skip` drops the head from the key (its letter stays in the
//! dead-letter queue, where `dead-letters replay` can still send it) and
//! drains the rest. Either takes effect at the next poll of a running
//! consumer of the handler (about a second).

use std::io::Write;

use consumer_core::PgStore;
use consumer_core::envelope::format_time;
use consumer_core::store::held::{HeldKey, HeldKeys, Release};
use serde_json::json;

use crate::args::Services;
use crate::database;
use crate::error::{Error, Result};
use crate::json::line;
use crate::render::{Table, write};

/// Keys listed per page read from the store.
const PAGE: u32 = 500;

pub fn explain(e: consumer_core::Error) -> Error {
    database::explain_store(e, "consumer_held_keys")
}

/// `list`: read page by page (keyset), so a long list costs no long query.
pub async fn list(
    services: &Services,
    handler: Option<&str>,
    limit: u32,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let store = PgStore::new(database::connect(services).await?);
    let mut keys: Vec<HeldKey> = Vec::new();
    while keys.len() < limit as usize {
        let after = keys.last().map(|k| (k.handler.as_str(), k.key.as_str()));
        let want = PAGE.min(limit - u32::try_from(keys.len()).unwrap_or(limit));
        let page = store
            .held_keys(handler, after, want)
            .await
            .map_err(explain)?;
        let last = page.len() < want as usize;
        keys.extend(page);
        if last {
            break;
        }
    }
    if json {
        for k in &keys {
            let v = json!({
                "handler": k.handler,
                "key": k.key,
                "head_message_id": k.head_message_id,
                "reason": k.reason,
                "status": k.status.as_str(),
                "parked": k.parked,
                "held_at": format_time(k.held_at),
            });
            writeln!(out, "{}", line(&v)).map_err(Error::io("writing the output"))?;
        }
        return Ok(());
    }
    let mut t = Table::new(&[
        "HANDLER", "KEY", "STATUS", "PARKED", "HEAD", "HELD AT", "REASON",
    ]);
    for k in &keys {
        t.row(vec![
            k.handler.clone(),
            k.key.clone(),
            k.status.to_string(),
            k.parked.to_string(),
            k.head_message_id.clone(),
            format_time(k.held_at),
            k.reason.clone(),
        ]);
    }
    write(out, &t.render())
}

/// `release`, or `skip` with `skip_head`.
pub async fn release(
    services: &Services,
    handler: &str,
    key: &str,
    skip_head: bool,
    out: &mut impl Write,
) -> Result<()> {
    let store = PgStore::new(database::connect(services).await?);
    match store
        .release_key(handler, key, skip_head)
        .await
        .map_err(explain)?
    {
        Release::Released => write(
            out,
            &format!(
                "key {key} of {handler} released{}: a running consumer of {handler} drains it in order\n",
                if skip_head { " without its head" } else { "" }
            ),
        ),
        _ => Err(Error::Refused(format!(
            "key {key} of {handler} is not held (never was, or released already): `consumer held-keys list` shows the held ones"
        ))),
    }
}
