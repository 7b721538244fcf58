//! The log lines as a listener, under the source's target
//! (`consumer::amqp`, `consumer::kafka`, `consumer::sqs`,
//! `consumer::kinesis`; `consumer::source` for another backend). Events the
//! counters say enough about write no line.

use super::counters::{Counter, SourceCounters};
use super::{Broker, Commit, Happened, Release, Revoke};

/// A `tracing` event at `$level` under `$broker`'s target: a target is part
/// of an event's static metadata, so each broker has its own call site.
macro_rules! line {
    ($broker:expr, $level:ident, $($rest:tt)+) => {
        match $broker {
            Broker::Amqp => tracing::$level!(target: "consumer::amqp", $($rest)+),
            Broker::Kafka => tracing::$level!(target: "consumer::kafka", $($rest)+),
            Broker::Sqs => tracing::$level!(target: "consumer::sqs", $($rest)+),
            Broker::Kinesis => tracing::$level!(target: "consumer::kinesis", $($rest)+),
            Broker::Other => tracing::$level!(target: "consumer::source", $($rest)+),
        }
    };
}

pub(super) fn on(b: Broker, counters: &SourceCounters, what: &Happened<'_>) {
    match *what {
        Happened::ReceiveFailed {
            at,
            operation,
            error,
            retry_in: Some(delay),
            ..
        } => {
            line!(b, debug, shard = %at, error = %error, ?delay, "{operation} failed; trying again")
        }
        Happened::AckFailed { .. }
        | Happened::ReleaseFailed { .. }
        | Happened::ExtensionRefused { .. }
        | Happened::ExtensionsFailed { .. }
        | Happened::RetryCutShort { .. }
        | Happened::DeadLetterRefused { .. } => on_settle(b, what),
        Happened::Reconnecting { .. }
        | Happened::BrokersDisconnected { .. }
        | Happened::Assigned { .. }
        | Happened::Revoked { .. }
        | Happened::RevokeTimedOut { .. }
        | Happened::CommitFailed { .. }
        | Happened::CloseTimedOut { .. } => on_membership(b, counters, what),
        Happened::LeaseTaken {
            shard,
            steal,
            start,
        } => {
            line!(b, info, shard = %shard, steal, ?start, "took a shard's lease");
        }
        Happened::LeaseLost { shard } => line!(b, info, shard = %shard, "lost a shard's lease"),
        Happened::ReceiveFailed { retry_in: None, .. }
        | Happened::Received { .. }
        | Happened::Polled
        | Happened::Revoking { .. }
        | Happened::Acked
        | Happened::Left
        | Happened::Released { .. }
        | Happened::Extended { .. }
        | Happened::RetriedByBroker
        | Happened::DeadLettered
        | Happened::IteratorRenewed
        | Happened::Rewound
        | Happened::Checkpointed { .. }
        | Happened::Holding { .. }
        | Happened::LeasesHeld(_)
        | Happened::BehindLatest(_) => {}
    }
}

/// The log lines of what settling and holding deliveries met: a failed
/// ack or release, a lease that could not be extended, a retry cut short,
/// a refused dead letter.
fn on_settle(b: Broker, what: &Happened<'_>) {
    match *what {
        Happened::AckFailed { error } => line!(
            b,
            warn,
            error = %error,
            "could not ack a settled message; the broker redelivers it when its lease ends, and dedup skips it"
        ),
        Happened::ReleaseFailed { why, error } => match why {
            Release::GroupRetried => line!(
                b,
                warn,
                error = %error,
                "could not give back a message of a retried group; the broker does when its lease ends"
            ),
            Release::Asked | Release::Dropped | Release::Closing => line!(
                b,
                debug,
                error = %error,
                "could not give back a message; the broker does when its lease ends"
            ),
        },
        Happened::ExtensionRefused { code, message } => line!(
            b,
            debug,
            code = %code,
            message = %message,
            "could not extend a message's visibility (settled meanwhile, or its receipt expired)"
        ),
        Happened::ExtensionsFailed { error, .. } => line!(
            b,
            warn,
            error = %error,
            "could not extend the visibility of held messages; trying again at the next tick"
        ),
        Happened::RetryCutShort { delay, left } => line!(
            b,
            warn,
            ?delay,
            ?left,
            "the retry's delay is past how long the broker holds a message from its receive; the message comes back earlier"
        ),
        Happened::DeadLetterRefused { destination, error } => line!(
            b,
            warn,
            destination,
            error = %error,
            "the dead-letter destination refused a letter"
        ),
        _ => {}
    }
}

/// The log lines of the source's connection and its place in a group:
/// reconnects, lost broker connections, rebalances, failed commits, a
/// close that timed out.
fn on_membership(b: Broker, counters: &SourceCounters, what: &Happened<'_>) {
    match *what {
        Happened::Reconnecting { queue, reason } => line!(
            b,
            warn,
            queue,
            reason,
            "lost the consuming connection; reconnecting on the next receive"
        ),
        Happened::BrokersDisconnected {
            group,
            brokers,
            lost,
        } => line!(
            b,
            warn,
            group,
            brokers = ?brokers,
            lost,
            total = counters.get(Counter::Reconnects),
            "lost connections to brokers; the client reconnects by itself"
        ),
        Happened::Assigned { partitions } => line!(b, info, partitions, "partitions assigned"),
        Happened::Revoked { partitions, how } => match how {
            Revoke::Committed => line!(b, info, partitions, "partitions revoked"),
            Revoke::Lost => line!(
                b,
                warn,
                partitions,
                "assignment lost: not committing (another member may own the partitions)"
            ),
            Revoke::OnClose => line!(b, info, partitions, "partitions released on close"),
        },
        Happened::RevokeTimedOut { held, timeout } => line!(
            b,
            warn,
            held,
            ?timeout,
            "revoke timeout: giving up partitions with records still running; the next owner gets them again"
        ),
        Happened::CommitFailed { commit, error } => match commit {
            Commit::Auto { offsets } => line!(
                b,
                debug,
                error = %error,
                offsets,
                "auto-commit failed (the next one carries the same offsets)"
            ),
            Commit::Revoke => line!(
                b,
                warn,
                error = %error,
                "commit on revoke failed; the next owner may see finished records again (dedup skips them)"
            ),
            Commit::Close => line!(
                b,
                warn,
                error = %error,
                "final commit failed; finished records may be delivered again (dedup skips them)"
            ),
        },
        Happened::CloseTimedOut { timeout } => line!(
            b,
            warn,
            ?timeout,
            "close timeout: the consumer could not leave its group in time (coordinator unreachable?); the group notices after session.timeout.ms"
        ),
        _ => {}
    }
}
