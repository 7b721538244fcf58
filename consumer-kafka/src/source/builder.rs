//! [`KafkaSourceBuilder`]: the consumer's and the settle producer's
//! configuration, and the start of the poll thread.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureProducer;
use tokio::sync::mpsc;

use super::instance_id;
use super::ledger::Ledger;
use super::poller::Poller;
use super::rebalance::Ctx;
use super::{KafkaSource, Link};
use crate::error::Error;
use crate::security::{self, KafkaSecurity};
use crate::topics::Topics;
use crate::tracing_context::TracingContext;

/// Properties set on the consumer unless overridden with
/// [`KafkaSourceBuilder::with_property`].
pub const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("enable.auto.commit", "true"),
    ("enable.auto.offset.store", "false"),
    ("auto.commit.interval.ms", "1000"),
    ("auto.offset.reset", "earliest"),
    ("partition.assignment.strategy", "cooperative-sticky"),
    // How long a member that stops heartbeating (a crash, a host lost)
    // keeps its partitions from everyone else: librdkafka's 45 s was what
    // a crash cost, 10 s (Kafka's default before 3.0) with the default
    // 3 s heartbeat. A clean close does not wait for it (the member
    // leaves), nor, with the derived static id, a restart on the host.
    ("session.timeout.ms", "10000"),
    ("statistics.interval.ms", "1000"),
    // What librdkafka prefetches is most of what a consumer holds under a
    // backlog: its defaults (64 MiB, 100 000 records a partition) took a
    // consumer to 125 MiB resident (benches/backlog_memory.rs). A queue that
    // small fills often, and librdkafka then waits fetch.queue.backoff.ms
    // (1 s by default) before fetching again: 10 ms keeps the throughput.
    ("queued.max.messages.kbytes", "4096"),
    ("queued.min.messages", "10000"),
    ("fetch.queue.backoff.ms", "10"),
];

/// Properties set on the producer of retry copies and dead letters unless
/// overridden with [`KafkaSourceBuilder::with_producer_property`].
pub const SETTLE_PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("message.timeout.ms", "30000"),
    ("linger.ms", "1"),
];

/// Defaults left out under the next-generation protocol (KIP-848), where
/// the broker assigns partitions and owns the session timeout, and
/// librdkafka refuses both unless the caller chose them.
const NOT_WITH_NEXT_GENERATION: &[&str] = &["partition.assignment.strategy", "session.timeout.ms"];

/// Properties the source needs and the builder refuses to change.
const CONSUMER_FIXED: &[(&str, &str)] = &[("enable.auto.offset.store", "false")];

/// Configures and starts a [`KafkaSource`]. Its `Debug` leaves out the
/// values of secret properties (passwords, keys, tokens).
#[derive(Clone)]
#[must_use]
pub struct KafkaSourceBuilder {
    brokers: String,
    group_id: String,
    topics: Topics,
    consumer: Vec<(String, String)>,
    producer: Vec<(String, String)>,
    max_per_partition: usize,
    revoke_timeout: Duration,
    max_poll_stall: Duration,
    close_timeout: Duration,
    membership: Membership,
    security: Option<KafkaSecurity>,
}

/// How the consumer joins its group.
#[derive(Clone, Debug)]
enum Membership {
    /// Dynamic, unless `CONSUMER_KAFKA_MEMBERSHIP=derived` asks for the
    /// derived id (the default).
    Default,
    /// A static id derived from the host name and a slot.
    Derived,
    /// The caller's static id.
    Static(String),
    /// No `group.instance.id`.
    Dynamic,
}

impl std::fmt::Debug for KafkaSourceBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSourceBuilder")
            .field("brokers", &self.brokers)
            .field("group_id", &self.group_id)
            .field("topics", &self.topics)
            .field("consumer", &security::redacted(&self.consumer))
            .field("producer", &security::redacted(&self.producer))
            .field("security", &self.security)
            .field("membership", &self.membership)
            .finish_non_exhaustive()
    }
}

impl KafkaSourceBuilder {
    /// Any librdkafka consumer property (`session.timeout.ms`,
    /// `fetch.max.bytes`, security settings, ...). `enable.auto.offset.store`
    /// stays `false`: the source stores offsets itself.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.consumer.push((key.into(), value.into()));
        self
    }

    /// Encrypts and authenticates the consumer's and the settle producer's
    /// links ([`KafkaSecurity`]); properties set with
    /// [`with_property`](Self::with_property) and
    /// [`with_producer_property`](Self::with_producer_property) override
    /// its.
    ///
    /// With a security protocol other than `PLAINTEXT` (from here or from
    /// a property), [`connect`](Self::connect) first asks the brokers for
    /// their metadata over a link with these settings, and fails with
    /// [`Error::Refused`], naming the cause, when a broker refuses the TLS
    /// handshake or the SASL credentials: a wrong certificate, an unknown
    /// CA or a bad password fails at start instead of being retried in the
    /// background. Brokers that cannot be reached are not an error at
    /// start, as without security.
    pub fn with_security(mut self, security: KafkaSecurity) -> Self {
        self.security = Some(security);
        self
    }

    /// Any librdkafka producer property for the producer that writes retry
    /// copies and dead letters (`batch.num.messages`, security, ...).
    pub fn with_producer_property(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.producer.push((key.into(), value.into()));
        self
    }

    /// Records pending in one partition before the poll thread holds off
    /// (default 256). See the module docs.
    pub fn with_max_per_partition(mut self, n: usize) -> Self {
        self.max_per_partition = n.max(1);
        self
    }

    /// How long the poll thread holds off while a partition is full before
    /// it pauses that partition and polls on (default 1 s; keep it far
    /// below `max.poll.interval.ms`).
    pub fn with_max_poll_stall(mut self, t: Duration) -> Self {
        self.max_poll_stall = t;
        self
    }

    /// How long a revoke waits for the revoked partitions' records to settle
    /// before giving them up (default 10 s; keep it well under
    /// `max.poll.interval.ms`, the poll thread waits in the callback).
    pub fn with_revoke_timeout(mut self, t: Duration) -> Self {
        self.revoke_timeout = t;
        self
    }

    /// How long `close` waits for the final offset commit and for leaving
    /// the group (default 10 s). A coordinator that cannot be reached
    /// within it does not hold the shutdown: what was not committed is
    /// delivered again to the partitions' next owner, and dedup skips it.
    pub fn with_close_timeout(mut self, t: Duration) -> Self {
        self.close_timeout = t;
        self
    }

    /// Joins the group as a static member (KIP-345) with this id:
    /// librdkafka's `group.instance.id`, which wins over the derived id
    /// and over one set with [`with_property`](Self::with_property). Give
    /// each instance an id of its own that survives its restarts (a
    /// StatefulSet pod's name): 1 to 249 characters of `[A-Za-z0-9._-]`,
    /// not `.` or `..`, checked by [`connect`](Self::connect).
    ///
    /// [`with_derived_membership`](Self::with_derived_membership) derives
    /// such an id on the host instead; without either, the member is
    /// dynamic. A member with the id given here does not leave the group
    /// when it closes (below).
    ///
    /// A restarted instance that comes back within `session.timeout.ms`
    /// gets its partitions back at once, from their committed offsets,
    /// without a rebalance of the group; a crashed dynamic member's
    /// partitions instead wait out its session timeout, then the whole
    /// group rebalances.
    ///
    /// The price: a static member with an id given here does not leave
    /// the group when it closes (librdkafka sends no LeaveGroup for it),
    /// so the partitions of an instance that is stopped and does not come
    /// back stay unserved until its session timeout ends, even after a
    /// clean [`close`]. `close` still commits every finished record first,
    /// so nothing is lost or done twice either way; only the wait differs.
    /// Keep `session.timeout.ms` above a restart's duration, and scale
    /// down knowing that each removed instance's partitions pause for that
    /// long.
    ///
    /// Two live instances with one id fence each other: the broker keeps
    /// the newer one, and the older one's source ends with
    /// [`Error::Fenced`] (not retriable: the consumer stops rather than
    /// rejoining in a loop).
    ///
    /// [`close`]: consumer_backend::Source::close
    pub fn with_static_membership(mut self, instance_id: impl Into<String>) -> Self {
        self.membership = Membership::Static(instance_id.into());
        self
    }

    /// Joins the group as a dynamic member: no `group.instance.id`, not
    /// even a derived one, whatever `CONSUMER_KAFKA_MEMBERSHIP` says. A
    /// crashed member's partitions wait out its `session.timeout.ms`
    /// (10 s by default) before anyone serves them, even when it restarts
    /// at once. This is the default.
    pub fn with_dynamic_membership(mut self) -> Self {
        self.membership = Membership::Dynamic;
        self
    }

    /// Joins the group as a static member whose id is derived on the
    /// host: `<hostname>-<slot>`, the slot held by an OS file lock so that
    /// one consumer of the group on the host has it (rules in the Kafka
    /// guide). A SIGKILLed process's restart on the same host takes the
    /// same id and its partitions back at once; the member leaves the
    /// group when it closes (its successor may be a new pod with another
    /// name). `CONSUMER_KAFKA_MEMBERSHIP=derived` in the environment does
    /// the same for every source not told otherwise here, and `dynamic`
    /// turns it off even here.
    ///
    /// Not the default: under a broker failover (the group's coordinator
    /// lost or cut off), librdkafka 2.12 can fence its own static member
    /// (`FencedInstanceId` on its offset commit, a fatal error), and the
    /// source stops with [`Error::Fenced`]; the fault campaign saw every
    /// consumer of a group stop that way at its first coordinator fault.
    /// Use it where a process supervisor restarts a stopped consumer.
    pub fn with_derived_membership(mut self) -> Self {
        self.membership = Membership::Derived;
        self
    }

    /// Whether `key` was set by the caller (or the secured link).
    fn chosen(&self, secured: &[(String, String)], key: &str) -> bool {
        secured.iter().chain(&self.consumer).any(|(k, _)| k == key)
    }

    /// The static id this consumer joins with, if any, and the slot lock
    /// that keeps a derived one its own. A `group.instance.id` set as a
    /// property counts as given; the next-generation protocol (KIP-848)
    /// gets no derived id: its broker refuses a restarted static member
    /// while the dead one's session lasts.
    fn member(&self, secured: &[(String, String)]) -> Result<Member, Error> {
        match &self.membership {
            Membership::Static(id) => {
                validate_instance_id(id)?;
                Ok(Member::Given(Some(id.clone())))
            }
            Membership::Dynamic => Ok(Member::Given(None)),
            Membership::Default if !instance_id::derived_by_environment() => {
                Ok(Member::Given(None))
            }
            Membership::Default | Membership::Derived
                if self.chosen(secured, "group.instance.id") =>
            {
                Ok(Member::Given(None))
            }
            Membership::Default | Membership::Derived => {
                let next_generation = secured
                    .iter()
                    .chain(&self.consumer)
                    .any(|(k, v)| k == "group.protocol" && v == "consumer");
                if next_generation {
                    return Ok(Member::Given(None));
                }
                Ok(
                    instance_id::derive(&self.group_id)
                        .map_or(Member::Given(None), Member::Derived),
                )
            }
        }
    }

    /// The group consumer's configuration: our defaults, then the secured
    /// link's settings and the caller's, then what must hold for the
    /// framework's guarantees (manual commits), which nothing overrides.
    fn consumer_config(
        &self,
        secured: &[(String, String)],
        instance_id: Option<&str>,
    ) -> ClientConfig {
        let mut cc = ClientConfig::new();
        cc.set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group_id)
            .set_log_level(crate::tracing_context::log_level());
        for (k, v) in CONSUMER_DEFAULTS {
            cc.set(*k, *v);
        }
        for (k, v) in secured.iter().chain(&self.consumer) {
            cc.set(k, v);
        }
        if let Some(id) = instance_id {
            cc.set("group.instance.id", id);
        }
        for (k, v) in CONSUMER_FIXED {
            cc.set(*k, *v);
        }
        // The next-generation protocol (KIP-848) assigns on the broker, and
        // librdkafka refuses a client-side strategy with it: ours is a
        // default, not a choice the caller made.
        if cc.get("group.protocol") == Some("consumer") {
            for key in NOT_WITH_NEXT_GENERATION {
                if !self.chosen(secured, key) {
                    cc.remove(key);
                }
            }
        }
        cc
    }

    /// The settle producer's configuration (retry copies, dead letters).
    fn producer_config(&self, secured: &[(String, String)]) -> ClientConfig {
        let mut pc = ClientConfig::new();
        pc.set("bootstrap.servers", &self.brokers)
            .set_log_level(crate::tracing_context::log_level());
        for (k, v) in SETTLE_PRODUCER_DEFAULTS {
            pc.set(*k, *v);
        }
        for (k, v) in secured.iter().chain(&self.producer) {
            pc.set(k, v);
        }
        pc
    }

    /// Creates the consumer and the settle producer, subscribes, and starts
    /// the poll thread. Topics are not created (see [`Topics::create`]).
    ///
    /// Async like every backend's `connect` (RabbitMQ's opens its
    /// connection here); librdkafka connects in the background, so this
    /// returns without waiting for the brokers, after the security check
    /// of [`with_security`](Self::with_security) when there is one.
    pub async fn connect(self) -> Result<KafkaSource, Error> {
        if let Membership::Static(id) = &self.membership {
            validate_instance_id(id)?;
        }
        let secured = crate::start_check::before_connect(
            &self.brokers,
            self.security.as_ref(),
            &self.consumer,
        )
        .await?;
        let member = self.member(&secured)?;
        let cc = self.consumer_config(&secured, member.id());
        let pc = self.producer_config(&secured);
        let producer: FutureProducer<TracingContext> = pc
            .create_with_context(TracingContext::new("settle producer"))
            .map_err(|source| Error::Config {
                context: "creating the settle producer",
                source: security::redact_error(source),
            })?;

        let shared = Arc::new(Ledger::default());
        let context = Ctx::new(
            Arc::clone(&shared),
            self.revoke_timeout,
            self.group_id.clone(),
        );
        let consumer: BaseConsumer<Ctx> =
            cc.create_with_context(context)
                .map_err(|source| Error::Config {
                    context: "creating the consumer",
                    source: security::redact_error(source),
                })?;
        consumer
            .subscribe(&self.topics.subscribed())
            .map_err(|e| Error::kafka("subscribing", e))?;

        let topics = Arc::new(self.topics);
        let (tx, rx) = mpsc::unbounded_channel();
        let max_body = Arc::new(AtomicUsize::new(usize::MAX));
        let leave = match &member {
            Member::Derived(d) => Some(d.id.clone()),
            Member::Given(_) => None,
        };
        let poller = Poller::new(
            consumer,
            Arc::clone(&shared),
            tx,
            Arc::clone(&topics),
            self.max_per_partition,
            self.max_poll_stall,
            Arc::clone(&max_body),
        )
        .leaving_on_close(leave.map(|id| (self.group_id.clone(), id)));
        let instance_id = cc.get("group.instance.id").map(str::to_owned);
        let fenced_as = (self.group_id.clone(), instance_id.clone());
        let done = spawn_poll_thread(poller, Arc::clone(&shared), fenced_as, member)?;
        tracing::info!(target: "consumer::kafka", %topics, group = %self.group_id, brokers = %self.brokers, "consuming");
        Ok(KafkaSource {
            rx,
            batch: VecDeque::new(),
            link: Arc::new(Link {
                shared,
                producer,
                topics,
            }),
            thread: Some(done),
            close_timeout: self.close_timeout,
            max_body,
            server: first_broker(&self.brokers),
            group: self.group_id,
            instance_id,
        })
    }
}

/// The consumer's static id: given (or none), or derived with the slot
/// lock that keeps it its own.
enum Member {
    Given(Option<String>),
    Derived(instance_id::DerivedId),
}

impl Member {
    fn id(&self) -> Option<&str> {
        match self {
            Self::Given(id) => id.as_deref(),
            Self::Derived(d) => Some(&d.id),
        }
    }
}

/// Runs `poller` on a thread of its own; the receiver hears how it ended
/// (once the consumer is closed: it has left the group, unless it is a
/// static member with a given id, which `fenced_as` names in a fencing
/// error). A derived id's slot lock is freed once the consumer is closed.
fn spawn_poll_thread(
    poller: Poller,
    ended: Arc<Ledger>,
    fenced_as: (String, Option<String>),
    member: Member,
) -> Result<tokio::sync::oneshot::Receiver<Result<(), Error>>, Error> {
    let (done_tx, done) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("consumer-kafka-poll".to_owned())
        .spawn(move || {
            let result = poller
                .run()
                .map_err(|e| e.fenced(&fenced_as.0, fenced_as.1.as_deref()));
            drop(member);
            ended.closed.store(true, Ordering::SeqCst);
            let _ = done_tx.send(result);
        })
        .map_err(|_| Error::PollThread("could not be started"))?;
    Ok(done)
}

impl KafkaSource {
    /// A builder with the safe defaults ([`CONSUMER_DEFAULTS`],
    /// [`SETTLE_PRODUCER_DEFAULTS`], 256 pending records per partition,
    /// 10 s revoke timeout).
    pub fn builder(
        brokers: impl Into<String>,
        group_id: impl Into<String>,
        topics: Topics,
    ) -> KafkaSourceBuilder {
        KafkaSourceBuilder {
            brokers: brokers.into(),
            group_id: group_id.into(),
            topics,
            consumer: Vec::new(),
            producer: Vec::new(),
            max_per_partition: 256,
            revoke_timeout: Duration::from_secs(10),
            max_poll_stall: Duration::from_secs(1),
            close_timeout: Duration::from_secs(10),
            membership: Membership::Default,
            security: None,
        }
    }
}

/// Kafka's rule for `group.instance.id` (the broker checks it like a topic
/// name): 1 to 249 characters of `[A-Za-z0-9._-]`, and neither `.` nor `..`.
pub(super) fn validate_instance_id(id: &str) -> Result<(), Error> {
    let ok_chars = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if id.is_empty() || id.len() > 249 || !ok_chars || id == "." || id == ".." {
        return Err(Error::InvalidInstanceId { id: id.to_owned() });
    }
    Ok(())
}

/// The first `host:port` of a bootstrap list (`host:port,host:port`, with
/// an optional `PLAINTEXT://`-style scheme), if it parses.
fn first_broker(brokers: &str) -> Option<(String, u16)> {
    let first = brokers.split(',').next()?.trim();
    let first = first.rsplit("://").next()?;
    let (host, port) = first.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod first_broker_tests {
    use super::first_broker;

    #[test]
    fn the_first_bootstrap_broker_is_the_server() {
        assert_eq!(
            first_broker("10.0.0.1:9092,10.0.0.2:9092"),
            Some(("10.0.0.1".to_owned(), 9092))
        );
        assert_eq!(
            first_broker("PLAINTEXT://kafka:29092"),
            Some(("kafka".to_owned(), 29092))
        );
        assert_eq!(first_broker("[::1]:9092"), Some(("::1".to_owned(), 9092)));
        assert_eq!(first_broker("kafka"), None);
    }
}

#[cfg(test)]
mod static_membership_tests {
    use super::*;

    fn builder() -> KafkaSourceBuilder {
        KafkaSource::builder(
            "127.0.0.1:1",
            "billing",
            Topics::new("orders").expect("topic"),
        )
    }

    #[tokio::test]
    async fn instance_ids_kafka_would_refuse_are_refused_with_a_sentence() {
        for id in ["", " ", "a b", "pod/0", ".", "..", &"x".repeat(250)] {
            let Err(e) = builder().with_static_membership(id).connect().await else {
                panic!("{id:?} was accepted");
            };
            assert!(matches!(e, Error::InvalidInstanceId { .. }), "{id:?}: {e}");
            assert!(!e.is_retriable());
            let core: consumer_backend::Error = e.into();
            assert!(
                core.to_string().contains("group.instance.id"),
                "{id:?}: {core}"
            );
        }
        for id in ["billing-0", "host.example_1", &"x".repeat(249)] {
            assert!(validate_instance_id(id).is_ok(), "{id:?}");
        }
    }

    #[test]
    fn the_next_generation_protocol_gets_no_client_side_assignment_strategy() {
        let classic = builder().consumer_config(&[], None);
        assert_eq!(
            classic.get("partition.assignment.strategy"),
            Some("cooperative-sticky")
        );
        let next = builder()
            .with_property("group.protocol", "consumer")
            .consumer_config(&[], None);
        assert_eq!(next.get("partition.assignment.strategy"), None);
        assert_eq!(
            next.get("session.timeout.ms"),
            None,
            "the broker's group.consumer.session.timeout.ms rules"
        );
        assert_eq!(classic.get("session.timeout.ms"), Some("10000"));
        let chosen = builder()
            .with_property("group.protocol", "consumer")
            .with_property("partition.assignment.strategy", "range")
            .consumer_config(&[], None);
        assert_eq!(
            chosen.get("partition.assignment.strategy"),
            Some("range"),
            "the caller's own choice is left for librdkafka to judge"
        );
    }

    #[tokio::test]
    async fn a_valid_instance_id_connects_as_a_static_member() {
        // librdkafka does not reach the broker in `connect`; closing is not
        // awaited here (nothing was joined).
        let source = builder()
            .with_static_membership("billing-0")
            .connect()
            .await
            .expect("a valid instance id connects");
        drop(source);
    }
}
