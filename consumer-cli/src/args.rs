//! The command line: subcommands, flags, and the environment variables the
//! examples use for addresses.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Inspect and replay dead letters, repair the outbox, purge the dedup store.
#[derive(Debug, Parser)]
#[command(name = "consumer", version, about, long_about = None)]
pub struct Cli {
    /// Addresses of the services.
    #[command(flatten)]
    pub services: Services,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the store and the brokers are.
#[derive(Debug, Args, Clone)]
pub struct Services {
    /// The handlers' store: dedup, attempts, dead-letter table, outbox.
    #[arg(
        long,
        env = "DATABASE_URL",
        global = true,
        default_value = "postgres://postgres@127.0.0.1:5432/test",
        hide_env_values = true
    )]
    pub database_url: String,
    /// The schema the store's tables are in (PostgreSQL `search_path`).
    #[arg(long, env = "CONSUMER_SCHEMA", global = true)]
    pub schema: Option<String>,
    /// RabbitMQ, for dead-letter queues and replays to work queues.
    #[arg(
        long,
        env = "AMQP_URL",
        global = true,
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f",
        hide_env_values = true
    )]
    pub amqp_url: String,
    /// Kafka, for dead-letter topics and replays to retry topics.
    #[arg(
        long,
        env = "KAFKA_BROKERS",
        global = true,
        default_value = "127.0.0.1:9092"
    )]
    pub kafka_brokers: String,
    /// SQS, for dead-letter queues and replays to SQS queues: an endpoint
    /// (an emulator such as moto); without one, the AWS SDK's configuration
    /// (region, credentials and endpoint from the environment).
    #[arg(long, env = "SQS_ENDPOINT", global = true)]
    pub sqs_endpoint: Option<String>,
    /// Kinesis, for dead-letter streams and replays to streams (the
    /// `kinesis` feature): an endpoint (an emulator such as moto); without
    /// one, the AWS SDK's configuration.
    #[arg(long, env = "KINESIS_ENDPOINT", global = true)]
    pub kinesis_endpoint: Option<String>,
    /// How to reach them securely: certificates and credentials.
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// Certificates and credentials of the services (the `tls` feature, on by
/// default). Passwords come from a file (`--*-password-file`) or an
/// environment variable (`DATABASE_PASSWORD` or `PGPASSWORD`,
/// `AMQP_PASSWORD`, `KAFKA_PASSWORD`), never from a flag, so that they are
/// not in the shell's history or the process list.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Secure connections")]
pub struct SecurityArgs {
    /// PEM file of the CA that signed PostgreSQL's certificate: TLS, with
    /// the certificate and the host name checked (sslmode=verify-full).
    #[arg(long, env = "DATABASE_CA", global = true)]
    pub database_ca: Option<PathBuf>,
    /// Client certificate (PEM) shown to PostgreSQL; with --database-key.
    #[arg(long, env = "DATABASE_CERT", global = true, requires = "database_key")]
    pub database_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "DATABASE_KEY", global = true, requires = "database_cert")]
    pub database_key: Option<PathBuf>,
    /// File holding PostgreSQL's password (else DATABASE_PASSWORD,
    /// PGPASSWORD, or the URL's).
    #[arg(long, env = "DATABASE_PASSWORD_FILE", global = true)]
    pub database_password_file: Option<PathBuf>,
    /// PEM file of a private CA that signed RabbitMQ's certificate (with an
    /// amqps:// URL; the system's roots are trusted too).
    #[arg(long, env = "AMQP_CA", global = true)]
    pub amqp_ca: Option<PathBuf>,
    /// Client certificate (PEM) shown to RabbitMQ; with --amqp-key.
    #[arg(long, env = "AMQP_CERT", global = true, requires = "amqp_key")]
    pub amqp_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "AMQP_KEY", global = true, requires = "amqp_cert")]
    pub amqp_key: Option<PathBuf>,
    /// RabbitMQ user, with the password of --amqp-password-file or
    /// AMQP_PASSWORD, instead of the URL's user info.
    #[arg(long, env = "AMQP_USER", global = true)]
    pub amqp_user: Option<String>,
    /// File holding the password of --amqp-user.
    #[arg(
        long,
        env = "AMQP_PASSWORD_FILE",
        global = true,
        requires = "amqp_user"
    )]
    pub amqp_password_file: Option<PathBuf>,
    /// Kafka's security.protocol (default: sasl-ssl with --kafka-user,
    /// else ssl with a certificate or CA flag, else plaintext).
    #[arg(long, env = "KAFKA_SECURITY_PROTOCOL", global = true, value_enum)]
    pub kafka_security_protocol: Option<KafkaProtocolArg>,
    /// Kafka's SASL mechanism, with --kafka-user.
    #[arg(long, env = "KAFKA_SASL_MECHANISM", global = true, value_enum)]
    pub kafka_sasl_mechanism: Option<KafkaMechanismArg>,
    /// Kafka SASL user, with the password of --kafka-password-file or
    /// KAFKA_PASSWORD.
    #[arg(long, env = "KAFKA_USER", global = true)]
    pub kafka_user: Option<String>,
    /// File holding the password of --kafka-user.
    #[arg(
        long,
        env = "KAFKA_PASSWORD_FILE",
        global = true,
        requires = "kafka_user"
    )]
    pub kafka_password_file: Option<PathBuf>,
    /// PEM file of a private CA that signed the Kafka brokers' certificates
    /// (else the system's roots).
    #[arg(long, env = "KAFKA_CA", global = true)]
    pub kafka_ca: Option<PathBuf>,
    /// Client certificate (PEM) shown to Kafka (mutual TLS); with
    /// --kafka-key.
    #[arg(long, env = "KAFKA_CERT", global = true, requires = "kafka_key")]
    pub kafka_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "KAFKA_KEY", global = true, requires = "kafka_cert")]
    pub kafka_key: Option<PathBuf>,
}

/// Kafka's `security.protocol` on the command line.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum KafkaProtocolArg {
    /// No TLS, no SASL.
    Plaintext,
    /// TLS.
    Ssl,
    /// TLS and SASL.
    SaslSsl,
    /// SASL without TLS.
    SaslPlaintext,
}

/// Kafka's SASL mechanism on the command line.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum KafkaMechanismArg {
    /// PLAIN (Confluent Cloud API keys).
    Plain,
    /// SCRAM-SHA-256.
    #[value(name = "scram-sha-256")]
    ScramSha256,
    /// SCRAM-SHA-512 (MSK).
    #[value(name = "scram-sha-512")]
    ScramSha512,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Dead letters: list, show, export, import, purge, replay.
    #[command(subcommand, name = "dead-letters", visible_alias = "dl")]
    DeadLetters(Box<DeadLetters>),
    /// The transactional outbox: status, retry failed aggregates.
    #[command(subcommand)]
    Outbox(Outbox),
    /// The dedup store: counts per handler, purge old rows.
    #[command(subcommand)]
    Dedup(Dedup),
    /// Sagas: list, show one, resume a compensation, abandon.
    #[command(subcommand)]
    Sagas(Sagas),
    /// Background jobs on the database (`consumer_jobs`): list, show one,
    /// retry one now, cancel one, pause and resume a queue.
    #[command(subcommand)]
    Jobs(Jobs),
    /// Keys held by sequenced dead letters (`on_dead_letter = hold_key`):
    /// list, release (the head runs again first), skip the head.
    #[command(subcommand, name = "held-keys")]
    HeldKeys(HeldKeys),
    /// A Kinesis consumer's shards: leases and checkpoints (in the store's
    /// database), and a checkpoint moved while no instance holds the lease.
    #[cfg(feature = "kinesis")]
    #[command(subcommand)]
    Kinesis(Kinesis),
    /// Pauses a handler (or every handler: `*`): its running consumers
    /// stop running its deliveries within about a second, spending no
    /// attempt, until it is resumed; kept in the store across restarts.
    Pause {
        /// The handler's name, or `*` for every handler.
        handler: String,
        /// Why (shown by `consumer paused`, logged by the consumers).
        #[arg(long, default_value = "")]
        reason: String,
        /// Who pauses (default: the login name).
        #[arg(long)]
        by: Option<String>,
    },
    /// Resumes a paused handler (or `*`): its deliveries run again, in
    /// order, within about a second.
    Resume {
        /// The handler's name, or `*`.
        handler: String,
    },
    /// The paused handlers: since when, by whom, why.
    Paused {
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Payload schemas: check the current ones against committed snapshots,
    /// record a new version.
    #[command(subcommand)]
    Schema(Schema),
    /// The operator's console in the browser: dead letters, replays, sagas,
    /// the outbox's backlog.
    Console(ConsoleArgs),
}

/// `console`: where it listens, its token, and the replay settings its
/// replays use.
#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// The address to listen on; one other machines can reach needs a
    /// token (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:9700")]
    pub listen: std::net::SocketAddr,
    /// File holding the console's token (else CONSUMER_CONSOLE_TOKEN):
    /// every page and action then requires it.
    #[arg(long, env = "CONSUMER_CONSOLE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// How long a replay waits for its canaries' outcome.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub canary_timeout: Duration,
    /// The store's dedup retention: older letters are not replayed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "7days")]
    pub retention: Duration,
    /// The outbox table.
    #[arg(long, default_value = "outbox_events")]
    pub outbox_table: String,
    /// Where the dead letters are (default: the store's dead-letter table).
    #[command(flatten)]
    pub place: PlaceArgs,
    /// Replays of letters from a Kafka topic go to this topic: the failed
    /// consumer group's own retry topic (needed with `--topic`), as
    /// `dead-letters replay --to-topic`.
    #[arg(long)]
    pub to_topic: Option<String>,
    /// Replays of letters from a Kinesis stream go to this stream instead of
    /// their origin, as `dead-letters replay --to-stream`.
    #[arg(long)]
    pub to_stream: Option<String>,
}

/// Which reading of which stream: the names the consumer's
/// `SqlLeaseStore` was given.
#[cfg(feature = "kinesis")]
#[derive(Debug, Args)]
pub struct KinesisReading {
    /// The application (the consumer's name in its lease store).
    #[arg(long)]
    pub application: String,
    /// The stream.
    #[arg(long)]
    pub stream: String,
}

/// Kinesis subcommands.
#[cfg(feature = "kinesis")]
#[derive(Debug, Subcommand)]
pub enum Kinesis {
    /// One row per shard: who holds its lease and until when, and its
    /// checkpoint (the last record settled; `SHARD_END` once a closed shard
    /// is finished).
    Shards {
        /// Whose shards.
        #[command(flatten)]
        reading: KinesisReading,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Moves a shard's checkpoint, only while no instance holds its lease
    /// (stop the consumers first): the next owner reads on after it.
    Checkpoint {
        /// Whose shard.
        #[command(flatten)]
        reading: KinesisReading,
        /// The shard (`shardId-000000000000`).
        #[arg(long)]
        shard: String,
        /// The sequence number the shard counts as settled up to.
        #[arg(
            long,
            conflicts_with = "to_start",
            required_unless_present = "to_start"
        )]
        to: Option<String>,
        /// No checkpoint: the shard is read again from the source's start
        /// position.
        #[arg(long)]
        to_start: bool,
        /// Says what would move, and writes nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Job-queue subcommands.
#[derive(Debug, Subcommand)]
pub enum Jobs {
    /// One row per job not finished, in enqueueing order: its queue, id,
    /// key, state, attempt, when it is due, its last error.
    List {
        /// Only this queue's jobs.
        #[arg(long)]
        queue: Option<String>,
        /// Only jobs in this state.
        #[arg(long, value_enum)]
        state: Option<JobStateArg>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One job in full: its row, headers and body.
    Show {
        /// The job's id (its message id, as `list` shows it).
        id: String,
        /// One JSON object per job instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Makes a scheduled job, or one waiting to retry, due now (its
    /// attempt is kept); a dead job is replayed with `consumer
    /// dead-letters replay`.
    Retry {
        /// The job's queue.
        queue: String,
        /// The job's id.
        id: String,
    },
    /// Deletes a job that no worker holds: it never runs.
    Cancel {
        /// The job's queue.
        queue: String,
        /// The job's id.
        id: String,
    },
    /// Pauses a queue: its jobs are not claimed until it is resumed (jobs
    /// running now finish); kept in the database across restarts.
    Pause {
        /// The queue.
        queue: String,
        /// Why (shown by `consumer jobs paused`).
        #[arg(long, default_value = "")]
        reason: String,
        /// Who pauses (default: the login name).
        #[arg(long)]
        by: Option<String>,
    },
    /// Resumes a paused queue: its workers claim its jobs again at once.
    Resume {
        /// The queue.
        queue: String,
    },
    /// The paused queues: since when, by whom, why.
    Paused {
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// A job's state, as `consumer jobs list --state` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobStateArg {
    /// Due, waiting for a worker.
    Ready,
    /// Held by a worker.
    Running,
    /// Not due yet, never tried.
    Scheduled,
    /// Not due yet, waiting to retry.
    Retrying,
}

/// Held-key subcommands.
#[derive(Debug, Subcommand)]
pub enum HeldKeys {
    /// One row per held key, by handler then key: its head (the
    /// dead-lettered message), why, its status, how many messages wait.
    List {
        /// Only this handler's keys.
        #[arg(long)]
        handler: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Releases a held key: its head gets its whole retry policy again and
    /// runs first, then the messages parked behind it, in order.
    Release {
        /// The handler that holds it.
        handler: String,
        /// The key.
        key: String,
    },
    /// Releases a held key without its head (it stays in the dead-letter
    /// queue): the messages parked behind it run, in order.
    Skip {
        /// The handler that holds it.
        handler: String,
        /// The key.
        key: String,
    },
}

/// Dead-letter subcommands.
#[derive(Debug, Subcommand)]
pub enum DeadLetters {
    /// A table of the letters (or counts per group); on a Kafka topic, where
    /// a replayed letter stays, a REPLAYED column from the replay journal.
    List {
        /// Where the letters are.
        #[command(flatten)]
        place: PlaceArgs,
        /// Which letters.
        #[command(flatten)]
        filter: FilterArgs,
        /// Counts per kind, handler or error instead of one row per letter.
        #[arg(long, value_enum)]
        group_by: Option<GroupBy>,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One letter with all its context.
    Show {
        /// The letter's id, as `list` shows it.
        id: String,
        /// Where the letter is.
        #[command(flatten)]
        place: PlaceArgs,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Writes the letters as JSON lines (every byte of payload and headers).
    Export {
        /// Where the letters are.
        #[command(flatten)]
        place: PlaceArgs,
        /// Which letters.
        #[command(flatten)]
        filter: FilterArgs,
        /// The file to write (default: standard output).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Adds letters from JSON lines written by `export`.
    Import {
        /// Where the letters go.
        #[command(flatten)]
        place: PlaceArgs,
        /// The file to read (default: standard input).
        #[arg(long, short)]
        input: Option<PathBuf>,
    },
    /// Deletes letters, after a confirmation.
    Purge {
        /// Where the letters are.
        #[command(flatten)]
        place: PlaceArgs,
        /// Which letters.
        #[command(flatten)]
        filter: FilterArgs,
        /// Do not ask.
        #[arg(long, short)]
        yes: bool,
    },
    /// Sends letters back to the handler that failed them.
    Replay(ReplayArgs),
}

/// Where letters live: the store's dead-letter table, a RabbitMQ or SQS
/// dead-letter queue, a Kafka dead-letter topic or a Kinesis dead-letter
/// stream.
#[derive(Debug, Args, Clone)]
pub struct PlaceArgs {
    /// A RabbitMQ dead-letter queue (e.g. `orders.dlq`) instead of the
    /// store's dead-letter table.
    #[arg(long, conflicts_with_all = ["topic", "sqs_queue", "kinesis_stream"])]
    pub queue: Option<String>,
    /// A Kafka dead-letter topic (e.g. `orders.dlq`) instead of the store's
    /// dead-letter table.
    #[arg(long, conflicts_with_all = ["sqs_queue", "kinesis_stream"])]
    pub topic: Option<String>,
    /// An SQS dead-letter queue, by name or URL (e.g.
    /// `orders-dlq.fifo`), instead of the store's dead-letter table;
    /// replays go to each letter's origin queue.
    #[arg(long, conflicts_with = "kinesis_stream")]
    pub sqs_queue: Option<String>,
    /// A Kinesis dead-letter stream (a `KinesisSource`'s
    /// `with_dead_letter_stream`) instead of the store's dead-letter table;
    /// replays go to each letter's origin stream (the `kinesis` feature).
    #[arg(long)]
    pub kinesis_stream: Option<String>,
}

/// Filters shared by list, export, purge and replay.
#[derive(Debug, Args, Clone, Default)]
pub struct FilterArgs {
    /// Only letters of this kind.
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,
    /// Only letters of this handler.
    #[arg(long)]
    pub handler: Option<String>,
    /// Only letters whose error or causes contain this text.
    #[arg(long)]
    pub error: Option<String>,
    /// Only letters with this partition key.
    #[arg(long)]
    pub key: Option<String>,
    /// Only letters whose last failure is at or after this (RFC 3339, or a
    /// duration ago such as `2h`).
    #[arg(long)]
    pub since: Option<String>,
    /// Only letters whose last failure is before this (RFC 3339, or a
    /// duration ago).
    #[arg(long)]
    pub until: Option<String>,
    /// Only the letter with this id (repeatable).
    #[arg(long = "id")]
    pub ids: Vec<String>,
    /// Only letters whose error is exactly this (the console's groups).
    #[arg(skip)]
    pub error_is: Option<String>,
}

/// A dead-letter kind on the command line.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum KindArg {
    /// Could not be decoded.
    Poison,
    /// A terminal error.
    Terminal,
    /// Retries used up.
    Exhausted,
}

/// What `list --group-by` counts by.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum GroupBy {
    /// The letter's kind.
    Kind,
    /// The handler that gave up.
    Handler,
    /// The error's message.
    Error,
}

/// `dead-letters replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Where the letters are.
    #[command(flatten)]
    pub place: PlaceArgs,
    /// Which letters.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Send replays to this Kafka topic: the failed consumer group's own
    /// retry topic (`Topics::with_retry_topic`). Needed for letters from a
    /// Kafka topic; without it replays go to the RabbitMQ work queue of
    /// each letter's origin.
    #[arg(long)]
    pub to_topic: Option<String>,
    /// Send the replays of letters that came from a Kinesis stream to this
    /// stream instead of their origin (the `kinesis` feature): a stream
    /// that only the failed application reads, so that the other
    /// applications reading the origin do not see the copy.
    #[arg(long)]
    pub to_stream: Option<String>,
    /// Letters per second at most, from 0.001 (one every 1000 s) to 1000;
    /// without it, as fast as the destination confirms.
    #[arg(long, value_parser = Rate::parse)]
    pub rate: Option<Rate>,
    /// Replay this many first and wait for their outcome; stop with exit
    /// code 4 if any comes back dead.
    #[arg(long)]
    pub canary: Option<usize>,
    /// How long to wait for the canaries' outcome.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub canary_timeout: Duration,
    /// Say what would be sent, send nothing, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The store's dedup retention: older letters are refused.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "7days")]
    pub retention: Duration,
    /// Replay letters older than the retention too (they may run twice).
    #[arg(long)]
    pub force: bool,
    /// JSON lines (one per letter's outcome) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Outbox subcommands.
#[derive(Debug, Subcommand)]
pub enum Outbox {
    /// Pending events, the oldest's age, failed aggregates with their errors,
    /// and the scheduled events not yet due with the next ones to fall due.
    Status {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// How many of the next scheduled events to list.
        #[arg(long, default_value_t = 10)]
        next: u32,
        /// The outbox table.
        #[arg(long, default_value = "outbox_events")]
        outbox_table: String,
    },
    /// Unblocks failed aggregates so the relay publishes them again, in order.
    Retry {
        /// `aggregate_type/aggregate_id`, as `status` shows it.
        aggregate: Option<String>,
        /// Every failed aggregate.
        #[arg(long, conflicts_with = "aggregate")]
        all: bool,
        /// The outbox table.
        #[arg(long, default_value = "outbox_events")]
        outbox_table: String,
    },
}

/// Saga subcommands.
#[derive(Debug, Subcommand)]
pub enum Sagas {
    /// One row per saga, oldest first: type, id, status, version, age,
    /// pending timeouts, reason.
    List {
        /// Which sagas.
        #[command(flatten)]
        filter: SagaFilterArgs,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One saga: its status, version, state, pending timeouts, compensation
    /// log and history.
    Show {
        /// The saga type (`Saga::name`).
        saga_type: String,
        /// The saga's id.
        saga_id: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Resumes a compensation (`compensation_failed`, or stuck
    /// `compensating`): the failed undo steps, and the one whose outcome
    /// never came, are sent again, last first. With `--compensate`,
    /// compensates a running or failed saga instead.
    Resume {
        /// The saga type.
        saga_type: String,
        /// The saga's id.
        saga_id: String,
        /// Start compensating a running (or failed) saga, for this reason.
        #[arg(long, value_name = "REASON")]
        compensate: Option<String>,
    },
    /// Stops an active saga, or one whose compensation failed and was
    /// settled by hand: `abandoned`, its timeouts cancelled, nothing undone.
    Abandon {
        /// The saga type.
        saga_type: String,
        /// The saga's id.
        saga_id: String,
        /// Why, kept on the saga.
        #[arg(long)]
        reason: String,
    },
}

/// Which sagas `sagas list` shows.
#[derive(Debug, Args, Clone, Default)]
pub struct SagaFilterArgs {
    /// Only sagas of this type.
    #[arg(long = "type", value_name = "SAGA_TYPE")]
    pub saga_type: Option<String>,
    /// Only sagas with this status (repeat it for several).
    #[arg(long, value_enum)]
    pub status: Vec<SagaStatusArg>,
    /// Only active sagas (running or compensating).
    #[arg(long, conflicts_with = "status")]
    pub active: bool,
    /// Only sagas started longer ago than this (e.g. `1h`).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub older_than: Option<Duration>,
}

/// A saga status on the command line.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum SagaStatusArg {
    /// Going forward.
    Running,
    /// Undoing its steps.
    Compensating,
    /// Finished.
    Completed,
    /// Finished: undone.
    Compensated,
    /// Finished without compensating.
    Failed,
    /// An undo step failed for good: waits for an operator.
    CompensationFailed,
    /// Stopped by an operator.
    Abandoned,
}

impl SagaStatusArg {
    /// The status it names.
    pub fn status(self) -> consumer_saga::SagaStatus {
        use consumer_saga::SagaStatus as S;
        match self {
            Self::Running => S::Running,
            Self::Compensating => S::Compensating,
            Self::Completed => S::Completed,
            Self::Compensated => S::Compensated,
            Self::Failed => S::Failed,
            Self::CompensationFailed => S::CompensationFailed,
            Self::Abandoned => S::Abandoned,
        }
    }
}

/// Dedup subcommands.
#[derive(Debug, Subcommand)]
pub enum Dedup {
    /// Rows per handler.
    Counts {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Deletes dedup and attempt rows older than a duration, in batches.
    Purge {
        /// e.g. `7days`: the store's retention.
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Duration,
        /// Rows per statement.
        #[arg(long, default_value_t = 1000)]
        batch: u32,
    },
}

/// Schema subcommands.
#[derive(Debug, Subcommand)]
pub enum Schema {
    /// Checks the current schemas against the snapshots; exit code 8 when
    /// one breaks compatibility.
    Check(SchemaArgs),
    /// Checks, then commits each changed schema as its type's next
    /// `vN.json` (never rewriting an older one); records nothing if one
    /// breaks compatibility.
    Record(SchemaArgs),
    /// Asks a schema registry whether a schema may become a subject's next
    /// version (the subject's compatibility rule, against its latest
    /// version); exit code 8 when it may not. Registers nothing.
    RegistryCheck(RegistryCheckArgs),
}

/// What `schema registry-check` asks.
#[derive(Debug, Args)]
pub struct RegistryCheckArgs {
    /// The registry's Confluent-compatible API
    /// (`http://127.0.0.1:8081/apis/ccompat/v7` for Apicurio).
    #[arg(long, env = "REGISTRY_URL", value_name = "URL")]
    pub registry: String,
    /// The subject (`orders-value` under the topic name strategy).
    #[arg(long)]
    pub subject: String,
    /// The schema file: Avro JSON, a `.proto` file, or a JSON Schema.
    #[arg(long, value_name = "FILE")]
    pub schema_file: PathBuf,
    /// The schema's format.
    #[arg(long, value_enum, default_value = "avro")]
    pub format: SchemaFormat,
    /// Basic auth's user (its password from `REGISTRY_PASSWORD`).
    #[arg(long, env = "REGISTRY_USER")]
    pub registry_user: Option<String>,
    /// Basic auth's password.
    #[arg(long, env = "REGISTRY_PASSWORD", hide_env_values = true)]
    pub registry_password: Option<String>,
    /// A bearer token instead of basic auth.
    #[arg(long, env = "REGISTRY_TOKEN", hide_env_values = true)]
    pub registry_token: Option<String>,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A schema's format, as the registry names it.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum SchemaFormat {
    /// Apache Avro.
    Avro,
    /// Protocol Buffers (a `.proto` file's text).
    Protobuf,
    /// JSON Schema.
    Json,
}

/// What `schema check` and `schema record` compare.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The snapshot directory: `<event-type>/v1.json, v2.json, ...`.
    #[arg(long, value_name = "DIR")]
    pub snapshots: PathBuf,
    /// The current schemas: a directory of `<event-type>.json`, or one
    /// file (its type is `--type`, or its name without `.json`).
    #[arg(long, value_name = "DIR|FILE")]
    pub current: PathBuf,
    /// BACKWARD, FORWARD, FULL, or one of them `_TRANSITIVE` (any case,
    /// `-` or `_`).
    #[arg(long, default_value = "full-transitive")]
    pub mode: consumer_contracts::compat::Mode,
    /// Only these event types (repeat it); default: every current schema,
    /// and every type with snapshots must have one.
    #[arg(long = "type", value_name = "EVENT_TYPE")]
    pub types: Vec<String>,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A `--rate`: letters per second within [`Rate::MIN`] and [`Rate::MAX`],
/// so the interval between two sends is a duration the pacer can wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    per_second: f64,
}

impl Rate {
    /// One letter every 1000 s: slower than that is a pause, not a rate,
    /// and a tiny rate would make the interval overflow a `Duration`.
    pub const MIN: f64 = 0.001;
    /// Tokio's timer ticks in milliseconds, so a shorter interval would not
    /// pace anything (and a huge rate would make it zero).
    pub const MAX: f64 = 1000.0;

    /// Parses a `--rate` value, refusing what is not a number in range
    /// with a sentence that says the range.
    pub fn parse(text: &str) -> Result<Self, String> {
        let out_of_range = || {
            format!(
                "must be a number of letters per second from {} to {} (omit --rate for no limit)",
                Self::MIN,
                Self::MAX
            )
        };
        let per_second: f64 = text.trim().parse().map_err(|_| out_of_range())?;
        // `contains` is false for NaN too.
        if !(Self::MIN..=Self::MAX).contains(&per_second) {
            return Err(out_of_range());
        }
        Ok(Self { per_second })
    }

    /// The time between two sends: from 1 ms to 1000 s.
    pub fn interval(self) -> Duration {
        Duration::from_secs_f64(1.0 / self.per_second)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_in_range_gives_the_interval_between_sends() {
        assert_eq!(
            Rate::parse("20").expect("in range").interval(),
            Duration::from_millis(50)
        );
        assert_eq!(
            Rate::parse("0.001").expect("the lowest").interval(),
            Duration::from_secs(1000)
        );
        assert_eq!(
            Rate::parse("1000").expect("the highest").interval(),
            Duration::from_millis(1)
        );
    }

    /// What used to panic in the pacer (a `Duration` overflow below, a zero
    /// interval above) is refused at parsing, with the range in the error.
    #[test]
    fn a_rate_out_of_range_is_refused_with_the_range() {
        for bad in [
            "1e-300", "0", "-1", "0.0009", "1000.5", "3e9", "1e309", "inf", "NaN", "fast", "",
        ] {
            let error = Rate::parse(bad).expect_err(bad);
            assert!(error.contains("from 0.001 to 1000"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_command_line_refuses_a_rate_out_of_range() {
        let parsed = Cli::try_parse_from([
            "consumer",
            "dead-letters",
            "replay",
            "--queue",
            "orders.dlq",
            "--rate",
            "1e-300",
        ]);
        let error = parsed.expect_err("out of range");
        assert_eq!(error.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(error.to_string().contains("from 0.001 to 1000"), "{error}");
    }
}
