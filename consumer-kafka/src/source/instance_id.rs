//! The static member id a source derives when asked to
//! ([`with_derived_membership`](super::KafkaSourceBuilder::with_derived_membership),
//! or `CONSUMER_KAFKA_MEMBERSHIP=derived`):
//! `<hostname>-<slot>`, where the slot is the lowest free one of the group
//! on this host, held by an OS file lock for as long as the consumer runs.
//!
//! Two processes (or two sources of one process) on one host never hold
//! the same slot, so never share an id; a SIGKILLed process's lock is
//! freed by the kernel, so its restart takes the same slot, the same id,
//! and its partitions back at once (KIP-345). The slot files are
//! `<temp dir>/consumer-kafka/<group>/<slot>.lock` (`TMPDIR` moves them),
//! each holding the pid of its last owner; they are never deleted (a
//! deleted file could be locked twice).
//!
//! No id is derived (the member is dynamic, and a log line says why) when
//! the host name cannot be read (`/proc/sys/kernel/hostname`, then
//! `HOSTNAME`), the lock directory cannot be used, or
//! [`MEMBERSHIP_ENV`] is `dynamic`.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// `CONSUMER_KAFKA_MEMBERSHIP=derived` turns the derived id on for every
/// source of the process that was given no membership in code, and
/// `dynamic` turns it off even for those asked for it (the operator's
/// switches, no rebuild).
pub const MEMBERSHIP_ENV: &str = "CONSUMER_KAFKA_MEMBERSHIP";

/// Whether the environment asks sources given no membership for the
/// derived id.
pub(super) fn derived_by_environment() -> bool {
    std::env::var(MEMBERSHIP_ENV).is_ok_and(|v| v == "derived")
}

/// Slots tried before giving up (1024 consumers of one group on a host).
const MAX_SLOTS: u32 = 1024;

/// Kafka's longest `group.instance.id`.
const MAX_ID: usize = 249;

/// A derived id and the lock that keeps it this consumer's own.
#[derive(Debug)]
pub(super) struct DerivedId {
    pub(super) id: String,
    /// Held until the consumer is closed; the kernel frees it on a crash.
    _lock: File,
}

/// An id for `group`, or `None` (dynamic membership) with a log line
/// saying why.
pub(super) fn derive(group: &str) -> Option<DerivedId> {
    match std::env::var(MEMBERSHIP_ENV) {
        Ok(v) if v == "dynamic" => {
            tracing::info!(target: "consumer::kafka", group, "{MEMBERSHIP_ENV}=dynamic: joining as a dynamic member");
            return None;
        }
        Ok(v) if v != "derived" => {
            tracing::warn!(target: "consumer::kafka", group, value = %v, "{MEMBERSHIP_ENV} is neither `dynamic` nor `derived`: deriving a static member id");
        }
        _ => {}
    }
    let Some(host) = hostname() else {
        tracing::warn!(target: "consumer::kafka", group, "no host name (/proc/sys/kernel/hostname, HOSTNAME): joining as a dynamic member, so a restart waits out the dead member's session");
        return None;
    };
    let dir = lock_dir(group);
    match lowest_free_slot(&dir) {
        Ok(Some((slot, lock))) => {
            let id = instance_id(&host, slot);
            tracing::info!(target: "consumer::kafka", group, instance_id = %id, lock = %dir.join(format!("{slot}.lock")).display(), "static member id derived from the host name and a slot");
            Some(DerivedId { id, _lock: lock })
        }
        Ok(None) => {
            tracing::warn!(target: "consumer::kafka", group, dir = %dir.display(), "all {MAX_SLOTS} slots of the group are held on this host: joining as a dynamic member");
            None
        }
        Err(e) => {
            tracing::warn!(target: "consumer::kafka", group, dir = %dir.display(), error = %e, "the slot locks cannot be used: joining as a dynamic member");
            None
        }
    }
}

/// The host name, read without `gethostname`: the kernel's, then the
/// shell's; `None` when neither has one.
fn hostname() -> Option<String> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    [kernel, std::env::var("HOSTNAME").ok()]
        .into_iter()
        .flatten()
        .map(|h| h.trim().to_owned())
        .find(|h| !h.is_empty())
}

/// Every character Kafka refuses in an id (or a path refuses in a file
/// name) as `_`.
fn sanitised(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `<host>-<slot>`, the host name sanitised and cut so the id stays within
/// Kafka's 249 characters.
fn instance_id(host: &str, slot: u32) -> String {
    let suffix = format!("-{slot}");
    let mut host = sanitised(host);
    host.truncate(MAX_ID - suffix.len());
    host + &suffix
}

/// The group's slot directory (its name sanitised: groups whose names
/// differ only in refused characters share slots, which costs nothing but
/// a higher slot number).
fn lock_dir(group: &str) -> PathBuf {
    let mut name = sanitised(group);
    name.truncate(200);
    if name.is_empty() || name.chars().all(|c| c == '.') {
        name.insert(0, '_');
    }
    std::env::temp_dir().join("consumer-kafka").join(name)
}

/// The lowest slot whose file this process could lock, with its lock.
fn lowest_free_slot(dir: &Path) -> std::io::Result<Option<(u32, File)>> {
    std::fs::create_dir_all(dir)?;
    for slot in 0..MAX_SLOTS {
        let mut file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{slot}.lock")))?;
        match file.try_lock() {
            Ok(()) => {
                // For whoever looks: which process holds the slot.
                file.set_len(0)?;
                writeln!(file, "{}", std::process::id())?;
                return Ok(Some((slot, file)));
            }
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_host_and_slot_within_kafkas_rule() {
        assert_eq!(instance_id("web-7f9c", 0), "web-7f9c-0");
        assert_eq!(instance_id("host name/é", 12), "host_name__-12");
        let long = instance_id(&"h".repeat(400), 1023);
        assert_eq!(long.len(), MAX_ID);
        assert!(long.ends_with("h-1023"));
        for id in ["web-7f9c-0", long.as_str()] {
            assert!(super::super::builder::validate_instance_id(id).is_ok());
        }
    }

    #[test]
    fn group_names_stay_inside_the_lock_directory() {
        let root = std::env::temp_dir().join("consumer-kafka");
        assert_eq!(lock_dir("billing"), root.join("billing"));
        assert_eq!(lock_dir("../etc"), root.join(".._etc"));
        assert_eq!(lock_dir(".."), root.join("_.."));
        assert_eq!(lock_dir(""), root.join("_"));
    }

    fn nanos() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    }

    #[test]
    fn slots_are_distinct_while_held_and_reused_once_freed() {
        let dir = std::env::temp_dir()
            .join("consumer-kafka-unit")
            .join(format!("{}-{}", std::process::id(), nanos()));
        let (a, lock_a) = lowest_free_slot(&dir).expect("lock").expect("a slot");
        let (b, _lock_b) = lowest_free_slot(&dir).expect("lock").expect("a slot");
        assert_eq!((a, b), (0, 1));
        drop(lock_a);
        let (c, _lock_c) = lowest_free_slot(&dir).expect("lock").expect("a slot");
        assert_eq!(c, 0, "the freed slot is the lowest again");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
