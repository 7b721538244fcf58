//! Encrypted and authenticated connections to every service, on the
//! secured listeners `scripts/services` starts beside the plain ones, with
//! the throwaway CA, certificates and password of
//! `scripts/services.d/tls.sh` (in `$CONSUMER_TOOLS_DIR/tls`):
//!
//! * PostgreSQL with TLS, role `consumer_tls` over TLS only,
//!   `sslmode=verify-full` against the test CA (`SECURE_DATABASE_URL`,
//!   default `postgres://consumer_tls@127.0.0.1:5432/test`);
//! * RabbitMQ's amqps listener (`AMQPS_URL`, default
//!   `amqps://127.0.0.1:5671/%2f`), user `consumer_tls`;
//! * Kafka's SASL_SSL listener with SCRAM and OAUTHBEARER
//!   (`KAFKA_SASL_SSL_BROKERS`, default `127.0.0.1:9094`) and its SSL
//!   listener that requires a client certificate (`KAFKA_MTLS_BROKERS`,
//!   default `127.0.0.1:9095`).
//!
//! Per broker: publish, consume, a retry through the broker and a dead
//! letter, the store on PostgreSQL over TLS, then the `consumer` binary
//! listing and replaying the letter over the same secured links; a wrong
//! client certificate, an unknown CA and a bad password each failing at
//! start with a sentence naming the service and the cause; and the
//! password and the client key found in no log line, metric label, dead
//! letter, error or output of the binary.

mod support;

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use consumer::amqp::{AmqpEndpoint, AmqpPublisher, AmqpSource, AmqpTls, Topology};
use consumer::envelope::names;
use consumer::kafka::{KafkaPublisher, KafkaSasl, KafkaSecurity, KafkaSource, Topics};
use consumer::testing::MetricsRecorder;
use consumer::{
    Consumer, Headers, Message, MessageContext, Outgoing, PgStore, PgTx, Publisher, Secret, Stats,
    handler,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgSslMode};
use support::{BookError, Booking, both, eventually, stdout};

/// The test CA's directory, made by `scripts/services` (tls.sh).
fn tls_dir() -> PathBuf {
    let dir = std::env::var_os("CONSUMER_TLS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CONSUMER_TOOLS_DIR").map(|d| PathBuf::from(d).join("tls")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/consumer-rs/tools/tls"))
        })
        .unwrap_or_else(|| PathBuf::from("tls"));
    assert!(
        dir.join("ca.pem").is_file() && dir.join("password").is_file(),
        "the secured listeners' test CA and password are not in {} (PostgreSQL, RabbitMQ and Kafka need them): run `scripts/services postgres rabbitmq kafka`, which makes them and starts the secured listeners, or set CONSUMER_TLS_DIR",
        dir.display()
    );
    dir
}

fn file(name: &str) -> PathBuf {
    tls_dir().join(name)
}

/// A password file that holds the wrong password.
fn wrong_password_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!("consumer-tls-wrong-{}", std::process::id()));
    std::fs::write(&path, "not-the-password\n").expect("a temporary file");
    path
}

/// The test password, read as a service would: from a file.
fn password() -> Secret {
    Secret::from_file(file("password")).unwrap_or_else(|e| panic!("{e}"))
}

const USER: &str = "consumer_tls";

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

fn database_url() -> String {
    env_or(
        "SECURE_DATABASE_URL",
        "postgres://consumer_tls@127.0.0.1:5432/test",
    )
}

fn amqps_url() -> String {
    env_or("AMQPS_URL", "amqps://127.0.0.1:5671/%2f")
}

fn kafka_sasl_ssl() -> String {
    env_or("KAFKA_SASL_SSL_BROKERS", "127.0.0.1:9094")
}

fn kafka_mtls() -> String {
    env_or("KAFKA_MTLS_BROKERS", "127.0.0.1:9095")
}

/// Fails with a sentence naming `service` when nothing takes connections
/// at `address` (`host:port`).
fn require(service: &str, address: &str, starts_it: &str) {
    assert!(
        support::takes_connections(address),
        "{service} does not take connections at {address}: run `{starts_it}`, which starts it beside the plain listener"
    );
}

/// What must never show: the password and the body of the client's key.
fn secrets() -> Vec<String> {
    let key = std::fs::read_to_string(file("client.key")).expect("client key");
    let key_line = key
        .lines()
        .find(|l| !l.starts_with("-----") && l.len() > 40)
        .expect("a line of the key")
        .to_owned();
    vec![password().expose().to_owned(), key_line]
}

/// Fails, naming `place`, when `text` holds a secret (shown in the
/// failure as `<secret>`).
fn assert_no_secret(place: &str, text: &str) {
    for secret in secrets() {
        assert!(
            !text.contains(&secret),
            "a secret reached {place}: {}",
            text.replace(&secret, "<secret>")
                .chars()
                .take(2000)
                .collect::<String>()
        );
    }
}

/// Every log line captured so far (INFO and above), checked for secrets.
fn assert_no_secret_in_logs() {
    let logs = consumer::testing::captured_logs();
    for secret in secrets() {
        for line in logs.matching(&[&secret]) {
            assert_no_secret("the logs", &line);
        }
    }
}

/// The database connection options the tests use: TLS checked against
/// the test CA and the host name, the password from its file.
fn pg_options() -> PgConnectOptions {
    let url = database_url();
    url.parse::<PgConnectOptions>()
        .unwrap_or_else(|e| panic!("SECURE_DATABASE_URL {url} does not parse: {e}"))
        .ssl_mode(PgSslMode::VerifyFull)
        .ssl_root_cert(file("ca.pem"))
        .password(password().expose())
}

/// Fails for good on bookings listed in `broken`; fails once (retried
/// through the broker) on bookings whose id starts with `flaky`; else
/// writes one business row.
#[handler(
    idempotency_key = b.id,
    retry = exponential(base = "20ms", max_delay = "100ms", attempts = 3, mode = redeliver),
    terminal = BookError::Broken(_),
)]
async fn book_securely(b: Booking, tx: &mut PgTx, ctx: &MessageContext) -> Result<(), BookError> {
    if b.id.starts_with("flaky") && ctx.attempt() == 1 {
        return Err(BookError::Flaky(b.id));
    }
    support::book_or_refuse(&b, tx).await
}

/// A fresh schema on PostgreSQL over TLS, made and used by role
/// `consumer_tls`, with the store's tables and the business ones.
struct SecureStore {
    pool: PgPool,
    schema: String,
}

impl SecureStore {
    async fn new() -> Self {
        let options = pg_options();
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "PostgreSQL does not take role {USER} over TLS at {} ({e}): run `scripts/services postgres`, which turns TLS on and makes the role",
                    database_url()
                )
            });
        let schema = format!("ct_tls_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&admin)
            .await
            .expect("create schema");
        admin.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options.options([("search_path", schema.as_str())]))
            .await
            .expect("a pool on the schema");
        PgStore::new(pool.clone())
            .migrate()
            .await
            .expect("the store's migrations");
        sqlx::raw_sql(
            "CREATE TABLE bookings (booking_id TEXT NOT NULL); \
             CREATE TABLE broken (booking_id TEXT PRIMARY KEY)",
        )
        .execute(&pool)
        .await
        .expect("business tables");
        Self { pool, schema }
    }

    async fn set_broken(&self, id: &str, broken: bool) {
        let sql = if broken {
            "INSERT INTO broken (booking_id) VALUES ($1) ON CONFLICT DO NOTHING"
        } else {
            "DELETE FROM broken WHERE booking_id = $1"
        };
        sqlx::query(sql)
            .bind(id)
            .execute(&self.pool)
            .await
            .expect("switch");
    }

    async fn bookings(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT booking_id FROM bookings ORDER BY booking_id")
            .fetch_all(&self.pool)
            .await
            .expect("bookings")
    }

    async fn drop(self) {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.schema
        )))
        .execute(&self.pool)
        .await;
        self.pool.close().await;
    }

    /// The binary with the database flags: TLS, the CA, the password file.
    fn cli(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_consumer"));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("DATABASE_URL", database_url())
            .env("DATABASE_CA", file("ca.pem"))
            .env("DATABASE_PASSWORD_FILE", file("password"))
            .env("CONSUMER_SCHEMA", &self.schema)
            .kill_on_drop(true);
        cmd
    }
}

/// The message of booking `id`: message id `m-<id>`, key `<id>`.
fn booking(id: &str) -> Message {
    let mut headers = Headers::new();
    headers.insert(names::ID, format!("m-{id}"));
    Message {
        key: Some(id.to_owned()),
        headers,
        payload: serde_json::to_vec(&Booking { id: id.to_owned() })
            .expect("json")
            .into(),
    }
}

/// A consumer of `book_securely` running in the background.
struct Running {
    stats: std::sync::Arc<Stats>,
    stop: tokio::sync::oneshot::Sender<()>,
    join: tokio::task::JoinHandle<Result<(), consumer::Error>>,
}

impl Running {
    fn start<S: consumer::source::Source + 'static>(
        source: S,
        store: &SecureStore,
        recorder: &MetricsRecorder,
    ) -> Self {
        let consumer = Consumer::new(source, PgStore::new(store.pool.clone()), book_securely)
            .with_meter(recorder.meter());
        let stats = consumer.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let join = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        Self { stats, stop, join }
    }

    /// Waits for `processed` commits and `dead` dead letters.
    async fn wait(&self, processed: u64, dead: u64) {
        tokio::time::timeout(
            Duration::from_secs(60),
            self.stats
                .wait_for(|s| s.processed >= processed && s.dead_terminal >= dead),
        )
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{processed} processed and {dead} dead letters within 60 s; got {:?}",
                self.stats.snapshot()
            )
        });
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.join
            .await
            .expect("consumer task")
            .expect("consumer ran cleanly");
    }
}

/// Runs the binary with `args`, and checks its output holds no secret.
async fn run(mut cmd: tokio::process::Command, args: &[&str]) -> Output {
    let out = cmd
        .args(args)
        .output()
        .await
        .expect("the consumer binary runs");
    assert_no_secret("the binary's output", &both(&out));
    out
}

/// No metric label holds a secret, and the server's address is one.
fn assert_metric_labels(recorder: &MetricsRecorder, address: &str) {
    let points = recorder.collect();
    let labels: Vec<String> = points
        .iter()
        .flat_map(|p| p.attributes.iter().map(|(k, v)| format!("{k}={v}")))
        .collect();
    assert!(
        labels.contains(&format!("server.address={address}")),
        "the metrics name the server: {labels:?}"
    );
    assert_no_secret("a metric label", &labels.join("\n"));
}

/// What a smoke test checks once `ok`, `flaky` and `broken` are published
/// to the consumer `running`: `flaky` retried, both committed, `broken`
/// dead-lettered; the metrics name the `server` and no secret; the binary
/// (from `cli`) lists the letter at `place` (`--queue` or `--topic` and its
/// name) with no secret in its context, and, once `broken` is fixed,
/// replays it (`replay_to`: where to, when the place does not say) for the
/// consumer to book; and no log line holds a secret.
async fn the_letter_goes_round(
    store: &SecureStore,
    running: Running,
    recorder: &MetricsRecorder,
    server: &str,
    cli: impl Fn() -> tokio::process::Command,
    place: [&str; 2],
    replay_to: &[&str],
) {
    running.wait(2, 1).await;
    assert!(running.stats.snapshot().retries >= 1, "flaky was retried");
    assert_eq!(store.bookings().await, ["flaky", "ok"]);
    assert_metric_labels(recorder, server);

    let list = run(
        cli(),
        &["dead-letters", "list", place[0], place[1], "--json"],
    )
    .await;
    assert_eq!(list.status.code(), Some(0), "{}", both(&list));
    let letters: Vec<serde_json::Value> = stdout(&list)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(letters.len(), 1, "{}", both(&list));
    assert_eq!(letters[0]["message_id"], "m-broken");
    assert_no_secret("the dead letter's context", &stdout(&list));

    store.set_broken("broken", false).await;
    let mut args = vec!["dead-letters", "replay", place[0], place[1]];
    args.extend_from_slice(replay_to);
    let replay = run(cli(), &args).await;
    assert_eq!(replay.status.code(), Some(0), "{}", both(&replay));
    assert!(stdout(&replay).contains("replayed 1"), "{}", both(&replay));
    eventually("the replayed booking", || async {
        store.bookings().await.len() == 3
    })
    .await;
    running.stop().await;
    assert_eq!(store.bookings().await, ["broken", "flaky", "ok"]);
    assert_no_secret_in_logs();
}

/// Runs `connect` and checks it fails within 15 s, naming `service` and
/// saying `cause`, with no secret in its message or `Debug`.
async fn fails_at_start<T, E: std::fmt::Display + std::fmt::Debug>(
    what: &str,
    service: &str,
    cause: &str,
    connect: impl std::future::Future<Output = Result<T, E>>,
) {
    let started = Instant::now();
    let Ok(result) = tokio::time::timeout(Duration::from_secs(30), connect).await else {
        panic!("{what}: the start hung for 30 s instead of failing");
    };
    let Err(e) = result else {
        panic!("{what}: the start succeeded");
    };
    let message = e.to_string();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{what}: failed only after {:?}: {message}",
        started.elapsed()
    );
    assert!(message.contains(service), "{what}: {message} {e:?}");
    assert!(message.contains(cause), "{what}: {message} {e:?}");
    assert_no_secret(
        &format!("the error of {what}"),
        &format!("{message}\n{e:?}"),
    );
}

mod postgresql {
    //! The store over TLS; the refusals.

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_store_runs_over_tls_and_a_wrong_certificate_an_unknown_ca_or_a_bad_password_fails_at_start()
     {
        let _logs = consumer::testing::captured_logs();
        let store = SecureStore::new().await;
        let ssl: bool =
            sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .fetch_one(&store.pool)
                .await
                .expect("pg_stat_ssl");
        assert!(ssl, "the store's connections are encrypted");

        // The library: the application's pool fails at once, sqlx naming
        // the cause.
        let connect = |options: PgConnectOptions| async move {
            PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options)
                .await
        };
        fails_at_start(
            "PostgreSQL with an unknown CA",
            "invalid peer certificate",
            "UnknownIssuer",
            connect(pg_options().ssl_root_cert(file("other-ca.pem"))),
        )
        .await;
        fails_at_start(
            "PostgreSQL with a bad password",
            "password authentication failed",
            USER,
            connect(pg_options().password("not-the-password")),
        )
        .await;

        // The binary: each refusal is a sentence naming PostgreSQL, exit 3.
        type Case<'a> = (&'a str, &'a [(&'a str, PathBuf)], &'a str);
        let cases: [Case<'_>; 3] = [
            (
                "a client certificate PostgreSQL does not trust",
                &[
                    ("DATABASE_CERT", file("other-client.pem")),
                    ("DATABASE_KEY", file("other-client.key")),
                ],
                "the TLS handshake failed",
            ),
            (
                "an unknown CA",
                &[("DATABASE_CA", file("other-ca.pem"))],
                "the TLS handshake failed",
            ),
            (
                "a bad password",
                &[("DATABASE_PASSWORD_FILE", wrong_password_file())],
                "it refused the login",
            ),
        ];
        for (what, env, cause) in cases {
            let mut cmd = store.cli();
            for (k, v) in env {
                cmd.env(k, v);
            }
            let started = Instant::now();
            let out = run(cmd, &["dedup", "counts"]).await;
            assert_eq!(out.status.code(), Some(3), "{what}: {}", both(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!(
                    "PostgreSQL at {} refused the connection",
                    database_url()
                )) && err.contains(cause),
                "{what}: {}",
                both(&out)
            );
            assert!(started.elapsed() < Duration::from_secs(15), "{what}: slow");
        }
        // A role that may only use TLS is refused without it.
        let plain = pg_options().ssl_mode(PgSslMode::Disable);
        let Err(e) = connect(plain).await else {
            panic!("role {USER} got in without TLS");
        };
        assert!(e.to_string().contains("no encryption"), "{e}");
        store.drop().await;
        assert_no_secret_in_logs();
    }
}

mod rabbitmq {
    //! amqps with credentials from a file and the test CA.

    use super::*;

    fn endpoint() -> AmqpEndpoint {
        AmqpEndpoint::new(amqps_url())
            .with_credentials(USER, password())
            .with_tls(AmqpTls::new().with_ca_file(file("ca.pem")))
    }

    fn topology() -> Topology {
        Topology::new(format!("ct.tls.{}", uuid::Uuid::now_v7().simple()))
            .expect("queue name")
            .with_max_retry_delay(Duration::from_secs(1))
            .with_expires(Duration::from_secs(600))
    }

    fn cli(store: &SecureStore) -> tokio::process::Command {
        let mut cmd = store.cli();
        cmd.env("AMQP_URL", amqps_url())
            .env("AMQP_USER", USER)
            .env("AMQP_PASSWORD_FILE", file("password"))
            .env("AMQP_CA", file("ca.pem"));
        cmd
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publish_consume_retry_and_dead_letter_over_amqps_then_the_binary_lists_and_replays_the_letter()
     {
        let _logs = consumer::testing::captured_logs();
        let store = SecureStore::new().await;
        let topology = topology();
        let source = AmqpSource::builder(endpoint(), topology.clone())
            .connect()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "RabbitMQ's amqps listener at {}: {e} (`scripts/services rabbitmq` starts it)",
                    amqps_url()
                )
            });
        let recorder = MetricsRecorder::new();
        let running = Running::start(source, &store, &recorder);
        store.set_broken("broken", true).await;
        let publisher = AmqpPublisher::builder(endpoint())
            .connect()
            .await
            .expect("a publisher over amqps");
        for id in ["ok", "flaky", "broken"] {
            publisher
                .publish_to("", topology.queue(), &booking(id), None)
                .await
                .expect("publish over amqps");
        }
        let dlq = topology.dead_letter_queue();
        let host = endpoint().server().map(|(h, _)| h.to_owned());
        the_letter_goes_round(
            &store,
            running,
            &recorder,
            host.as_deref().unwrap_or_default(),
            || cli(&store),
            ["--queue", dlq],
            &[],
        )
        .await;
        publisher.close().await;
        store.drop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_certificate_an_unknown_ca_or_a_bad_password_fails_at_start_naming_rabbitmq() {
        let _logs = consumer::testing::captured_logs();
        let amqps = endpoint();
        let (host, port) = amqps.server().expect("AMQPS_URL names a host");
        require(
            "RabbitMQ's amqps listener",
            &format!("{host}:{port}"),
            "scripts/services rabbitmq",
        );
        let server = match endpoint().server() {
            Some((host, port)) => format!("RabbitMQ at {host}:{port}"),
            None => panic!("AMQPS_URL {} names no host", amqps_url()),
        };
        let server = server.as_str();
        let start = |endpoint: AmqpEndpoint| async move {
            AmqpSource::builder(endpoint, topology()).connect().await
        };
        fails_at_start(
            "amqps with a client certificate RabbitMQ does not trust",
            server,
            "this client's certificate",
            start(
                endpoint().with_tls(
                    AmqpTls::new()
                        .with_ca_file(file("ca.pem"))
                        .with_client_certificate(
                            file("other-client.pem"),
                            file("other-client.key"),
                        ),
                ),
            ),
        )
        .await;
        fails_at_start(
            "amqps with an unknown CA",
            server,
            "not signed by a CA this client trusts",
            start(endpoint().with_tls(AmqpTls::new().with_ca_file(file("other-ca.pem")))),
        )
        .await;
        fails_at_start(
            "amqps with a bad password",
            server,
            "a wrong user name or password",
            start(endpoint().with_credentials(USER, Secret::new("not-the-password"))),
        )
        .await;
        // A client certificate the test CA signed is accepted.
        let trusted = endpoint().with_tls(
            AmqpTls::new()
                .with_ca_file(file("ca.pem"))
                .with_client_certificate(file("client.pem"), file("client.key")),
        );
        let connection = trusted
            .connect("consumer-tls-test")
            .await
            .expect("a trusted client certificate");
        let _ = connection.close(200, "done".into()).await;

        // The binary: a sentence naming RabbitMQ, exit 3.
        let store = SecureStore::new().await;
        let mut cmd = cli(&store);
        cmd.env("AMQP_CA", file("other-ca.pem"));
        let out = run(cmd, &["dead-letters", "list", "--queue", "ct.tls.none.dlq"]).await;
        assert_eq!(out.status.code(), Some(3), "{}", both(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!(
                "RabbitMQ at {} refused the connection: the TLS handshake failed",
                amqps_url()
            )),
            "{}",
            both(&out)
        );
        store.drop().await;
        assert_no_secret_in_logs();
    }
}

mod kafka {
    //! SASL_SSL with SCRAM and OAUTHBEARER, and SSL with client
    //! certificates.

    use super::*;

    fn scram() -> KafkaSecurity {
        KafkaSecurity::sasl_ssl(KafkaSasl::scram_sha_512(USER, password()))
            .with_ca_file(file("ca.pem"))
    }

    fn cli(store: &SecureStore) -> tokio::process::Command {
        let mut cmd = store.cli();
        cmd.env("KAFKA_BROKERS", kafka_sasl_ssl())
            .env("KAFKA_USER", USER)
            .env("KAFKA_PASSWORD_FILE", file("password"))
            .env("KAFKA_SASL_MECHANISM", "scram-sha-512")
            .env("KAFKA_CA", file("ca.pem"));
        cmd
    }

    /// Fresh work, retry and dead-letter topics, made over SASL_SSL.
    async fn topics() -> Topics {
        let topic = format!("tls-{}", uuid::Uuid::new_v4().simple());
        let topics = Topics::new(&topic)
            .expect("topic")
            .with_retry_topic(format!("{topic}.retry"))
            .expect("retry topic");
        topics
            .create_with_security(&kafka_sasl_ssl(), &scram(), 2, 1)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "Kafka's SASL_SSL listener at {}: {e} (`scripts/services kafka` starts it)",
                    kafka_sasl_ssl()
                )
            });
        topics
    }

    async fn publish(brokers: &str, security: KafkaSecurity, topic: &str, ids: &[&str]) {
        let publisher = KafkaPublisher::builder(brokers)
            .with_security(security)
            .connect()
            .await
            .expect("a secured publisher");
        let batch: Vec<Outgoing> = ids
            .iter()
            .map(|id| Outgoing {
                destination: topic.to_owned(),
                message: booking(id),
            })
            .collect();
        for r in Publisher::publish(&publisher, &batch).await {
            r.expect("publish over a secured link");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publish_consume_retry_and_dead_letter_over_sasl_ssl_then_the_binary_lists_and_replays_the_letter()
     {
        let _logs = consumer::testing::captured_logs();
        let store = SecureStore::new().await;
        let topics = topics().await;
        let retry = topics.retry_topic().expect("retry topic").to_owned();
        let dlt = topics.dead_letter_topic().to_owned();
        let source = KafkaSource::builder(
            kafka_sasl_ssl(),
            format!("g-{}", topics.topic()),
            topics.clone(),
        )
        .with_security(scram())
        .connect()
        .await
        .expect("a source over SASL_SSL");
        let recorder = MetricsRecorder::new();
        let running = Running::start(source, &store, &recorder);
        store.set_broken("broken", true).await;
        publish(
            &kafka_sasl_ssl(),
            scram(),
            topics.topic(),
            &["ok", "flaky", "broken"],
        )
        .await;
        the_letter_goes_round(
            &store,
            running,
            &recorder,
            kafka_sasl_ssl().rsplit_once(':').map_or("", |(h, _)| h),
            || cli(&store),
            ["--topic", &dlt],
            &["--to-topic", &retry],
        )
        .await;
        store.drop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn oauthbearer_and_client_certificates_carry_records_too() {
        let _logs = consumer::testing::captured_logs();
        require(
            "Kafka's SSL listener",
            &kafka_mtls(),
            "scripts/services kafka",
        );
        let topics = topics().await;
        let oauth = KafkaSecurity::sasl_ssl(KafkaSasl::oauthbearer_unsecured(USER))
            .with_ca_file(file("ca.pem"));
        publish(
            &kafka_sasl_ssl(),
            oauth.clone(),
            topics.topic(),
            &["by-oauthbearer"],
        )
        .await;
        let mtls = KafkaSecurity::ssl()
            .with_ca_file(file("ca.pem"))
            .with_client_certificate(file("client.pem"), file("client.key"));
        publish(
            &kafka_mtls(),
            mtls.clone(),
            topics.topic(),
            &["by-client-certificate"],
        )
        .await;

        let store = SecureStore::new().await;
        let source = KafkaSource::builder(kafka_mtls(), format!("g-{}", topics.topic()), topics)
            .with_security(mtls)
            .connect()
            .await
            .expect("a source with a client certificate");
        let recorder = MetricsRecorder::new();
        let running = Running::start(source, &store, &recorder);
        running.wait(2, 0).await;
        running.stop().await;
        assert_eq!(
            store.bookings().await,
            ["by-client-certificate", "by-oauthbearer"]
        );
        store.drop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_certificate_an_unknown_ca_or_a_bad_password_fails_at_start_naming_kafka() {
        let _logs = consumer::testing::captured_logs();
        for (listener, address) in [("SASL_SSL", kafka_sasl_ssl()), ("SSL", kafka_mtls())] {
            require(
                &format!("Kafka's {listener} listener"),
                &address,
                "scripts/services kafka",
            );
        }
        let topics =
            Topics::new(format!("tls-refused-{}", uuid::Uuid::new_v4().simple())).expect("topic");
        let start = |brokers: String, security: KafkaSecurity| {
            let topics = topics.clone();
            async move {
                KafkaSource::builder(brokers, "g-refused", topics)
                    .with_security(security)
                    .connect()
                    .await
            }
        };
        fails_at_start(
            "SSL with a client certificate Kafka does not trust",
            &format!("Kafka at {} refused this client at start", kafka_mtls()),
            "refused this client's certificate",
            start(
                kafka_mtls(),
                KafkaSecurity::ssl()
                    .with_ca_file(file("ca.pem"))
                    .with_client_certificate(file("other-client.pem"), file("other-client.key")),
            ),
        )
        .await;
        fails_at_start(
            "SASL_SSL with an unknown CA",
            &format!("Kafka at {} refused this client at start", kafka_sasl_ssl()),
            "not signed by a CA this client trusts",
            start(
                kafka_sasl_ssl(),
                KafkaSecurity::sasl_ssl(KafkaSasl::scram_sha_512(USER, password()))
                    .with_ca_file(file("other-ca.pem")),
            ),
        )
        .await;
        fails_at_start(
            "SASL_SSL with a bad password",
            &format!("Kafka at {} refused this client at start", kafka_sasl_ssl()),
            "refused the SASL credentials",
            start(
                kafka_sasl_ssl(),
                KafkaSecurity::sasl_ssl(KafkaSasl::scram_sha_256(
                    USER,
                    Secret::new("not-the-password"),
                ))
                .with_ca_file(file("ca.pem")),
            ),
        )
        .await;
        // The publisher checks alike.
        fails_at_start(
            "a publisher with a bad password",
            "Kafka at",
            "refused the SASL credentials",
            KafkaPublisher::builder(kafka_sasl_ssl())
                .with_security(
                    KafkaSecurity::sasl_ssl(KafkaSasl::plain(USER, Secret::new("nope")))
                        .with_ca_file(file("ca.pem")),
                )
                .connect(),
        )
        .await;

        // The binary: a sentence naming Kafka, exit 3.
        let store = SecureStore::new().await;
        let mut cmd = cli(&store);
        cmd.env("KAFKA_PASSWORD_FILE", wrong_password_file());
        let out = run(cmd, &["dead-letters", "list", "--topic", "tls-none.dlq"]).await;
        assert_eq!(out.status.code(), Some(3), "{}", both(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!(
                "Kafka at {} refused the connection: the broker refused the SASL credentials",
                kafka_sasl_ssl()
            )),
            "{}",
            both(&out)
        );
        store.drop().await;
        assert_no_secret_in_logs();
    }
}
