//! The conformance suite on the in-memory broker with the PostgreSQL store
//! (needs PostgreSQL: `DATABASE_URL`, default postgres://postgres@127.0.0.1:5432/test).

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(crate::conformance::broker::MemoryHarness);

mod outage {
    //! A database that goes away: the consumer treats it as transient,
    //! retries, and loses nothing. The outage is real from the client's side:
    //! the store talks to PostgreSQL through a TCP proxy that the test cuts
    //! (every connection dropped, new ones refused) and restores.

    use std::net::SocketAddr;
    use std::str::FromStr;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use consumer::{Consumer, MemoryBroker, Store};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::task::AbortHandle;

    use crate::conformance::support::{self, Harness, Job, PgHarness};
    use crate::suite::handlers::patient;

    struct Proxy {
        addr: SocketAddr,
        upstream: String,
        tasks: Arc<Mutex<Vec<AbortHandle>>>,
    }

    impl Proxy {
        async fn start(upstream: String) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
            let addr = listener.local_addr().expect("addr");
            let proxy = Self {
                addr,
                upstream,
                tasks: Arc::default(),
            };
            proxy.serve(listener);
            proxy
        }

        fn serve(&self, listener: TcpListener) {
            let upstream = self.upstream.clone();
            let tasks = Arc::clone(&self.tasks);
            let accept = tokio::spawn({
                let tasks = Arc::clone(&tasks);
                async move {
                    while let Ok((mut client, _)) = listener.accept().await {
                        let upstream = upstream.clone();
                        let conn = tokio::spawn(async move {
                            if let Ok(mut server) = TcpStream::connect(&upstream).await {
                                let _ =
                                    tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            }
                        });
                        tasks.lock().expect("tasks").push(conn.abort_handle());
                    }
                }
            });
            tasks.lock().expect("tasks").push(accept.abort_handle());
        }

        /// Drops every connection and stops listening: connects are refused.
        fn cut(&self) {
            for t in self.tasks.lock().expect("tasks").drain(..) {
                t.abort();
            }
        }

        async fn restore(&self) {
            // The aborted accept task may still hold the port for a moment.
            let listener = loop {
                match TcpListener::bind(self.addr).await {
                    Ok(l) => break l,
                    Err(_) => tokio::task::yield_now().await,
                }
            };
            self.serve(listener);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn database_outage_is_transient_and_loses_nothing() {
        let h = PgHarness::new().await;
        let direct = sqlx::postgres::PgConnectOptions::from_str(&support::database_url())
            .expect("DATABASE_URL");
        let upstream = format!("{}:{}", direct.get_host(), direct.get_port());
        let proxy = Proxy::start(upstream).await;
        let options = direct
            .clone()
            .host("127.0.0.1")
            .port(proxy.addr.port())
            .options([("search_path", h.schema.as_str())]);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_millis(500))
            .connect_with(options)
            .await
            .expect("pool through the proxy");
        let store = Store::new(pool);

        let broker = MemoryBroker::new(2);
        let jobs: Vec<Job> = (0..10)
            .map(|i| Job::new(&format!("o{}", i % 3), i))
            .collect();
        for j in &jobs {
            broker.publish("t", j.message()).await.expect("publish");
        }
        proxy.cut();
        let consumer = Consumer::new(broker.source("t"), store, patient);
        let stats = consumer.stats();
        let drained = broker.clone();
        let run = tokio::spawn(consumer.run_until(async move { drained.wait_drained("t").await }));

        let during = support::within(stats.wait_for(|s| s.retries >= 3)).await;
        assert_eq!(during.processed, 0);
        proxy.restore().await;
        support::within(run).await.expect("join").expect("consumer");

        for j in &jobs {
            assert_eq!(h.effects_of("patient", &j.id).await, 1, "{}", j.id);
        }
        let after = stats.snapshot();
        assert_eq!(
            after.dead_letters(),
            0,
            "an outage is not a reason to give up"
        );
        assert_eq!(after.processed, 10);
    }
}

mod nul {
    //! PostgreSQL refuses the NUL character in `TEXT` and `JSONB`, and a
    //! producer can put one in a message id or a key: the store writes it
    //! as U+FFFD, so such a message is processed once and, when it must be
    //! dead-lettered where only the table takes it, lands there instead of
    //! coming back for ever.

    use consumer::testing::{Faults, FaultySource};
    use consumer::{Consumer, MemoryBroker, Message, PgTx, error::BrokerErrorKind, handler};

    use crate::conformance::support::{self, Harness, PgHarness};

    #[derive(serde::Deserialize)]
    struct Ping {
        #[allow(dead_code)]
        n: u32,
    }

    #[handler]
    async fn ping(_ping: Ping, _tx: &mut PgTx) -> Result<(), std::convert::Infallible> {
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_message_id_with_a_nul_is_claimed_once_and_dead_lettered_to_the_table() {
        let h = PgHarness::new().await;
        let broker = MemoryBroker::new(1);
        let message = || {
            Message::raw(&br#"{"n":1}"#[..])
                .with_id("ping\0one")
                .with_key("k\0")
        };
        broker.publish("t", message()).await.expect("publish");
        broker.publish("t", message()).await.expect("publish");
        let poison = Message::raw(&b"{not json"[..])
            .with_id("poison\0")
            .with_key("k\0");
        broker.publish("t", poison).await.expect("publish");

        let faults = Faults::new();
        faults.refuse_dead_letters(Some(BrokerErrorKind::NoDestination));
        let source = FaultySource::new(broker.source("t"), faults);
        let consumer = Consumer::new(source, h.store(), ping);
        let stats = consumer.stats();
        let drained = broker.clone();
        support::within(consumer.run_until(async move { drained.wait_drained("t").await }))
            .await
            .expect("consumer");

        let s = stats.snapshot();
        assert_eq!((s.processed, s.duplicates), (1, 1), "{s:?}");
        assert_eq!(
            (s.dead_poison, s.dead_letters_stored, s.settle_failures),
            (1, 1, 0),
            "{s:?}"
        );
        let stored = h.stored_dead_letters().await;
        assert_eq!(stored.len(), 1, "{stored:#?}");
        assert_eq!(stored[0].message_id, "poison\u{FFFD}");
        assert_eq!(stored[0].payload, b"{not json");
    }
}

mod key_limit {
    //! A dedup key PostgreSQL's index cannot hold (a btree row is at most
    //! about 2.7 kB) is refused on every attempt: the message is poison,
    //! dead-lettered at once with the reason, not retried through the
    //! policy and dead-lettered as exhausted.

    use consumer::{Consumer, MemoryBroker, Message, PgTx, handler};

    use crate::conformance::support::{self, Harness, PgHarness};

    #[derive(serde::Deserialize)]
    struct Ping {
        #[allow(dead_code)]
        n: u32,
    }

    #[handler(retry = exponential(base = "10ms", max_delay = "20ms", attempts = 4))]
    async fn ping(_ping: Ping, _tx: &mut PgTx) -> Result<(), std::convert::Infallible> {
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_key_too_long_for_the_index_is_poison_with_the_reason() {
        let h = PgHarness::new().await;
        let broker = MemoryBroker::new(1);
        // Random, so that compression cannot bring it under the limit.
        let id: String = (0..600)
            .map(|_| uuid::Uuid::new_v4().simple().to_string())
            .collect();
        let long = Message::raw(&br#"{"n":1}"#[..]).with_id(id.as_str());
        broker.publish("t", long).await.expect("publish");
        let fine = Message::raw(&br#"{"n":2}"#[..]).with_id("short");
        broker.publish("t", fine).await.expect("publish");

        let consumer = Consumer::new(broker.source("t"), h.store(), ping);
        let stats = consumer.stats();
        let drained = broker.clone();
        support::within(consumer.run_until(async move { drained.wait_drained("t").await }))
            .await
            .expect("consumer");

        let s = stats.snapshot();
        assert_eq!((s.processed, s.retries, s.dead_poison), (1, 0, 1), "{s:?}");
        let letters = broker.dead_letter_records("t");
        assert_eq!(letters.len(), 1);
        let error = &letters[0].error;
        assert!(error.contains("dedup key"), "{error}");
    }
}

mod unsettled_letters {
    //! Dead letters whose settle steps do not end: one that neither the
    //! broker nor the store takes holds its delivery, and so its key (the
    //! handler does not run again, the key's later message waits, and once
    //! the store takes the letter the key moves on; it used to be released,
    //! to come back, fail the same way and be released again, for as long
    //! as both refused); one the broker takes and never confirms (a confirm
    //! lost with its connection) fails after the settle timeout as one that
    //! can heal, and goes to the store's table.

    use std::time::Duration;

    use consumer::testing::{Faults, FaultySource};
    use consumer::{Consumer, MemoryBroker, Message, PgTx, error::BrokerErrorKind, handler};

    use crate::conformance::support::{self, Harness, PgHarness};

    #[derive(serde::Deserialize)]
    struct Entry {
        #[allow(dead_code)]
        n: u32,
    }

    #[handler]
    async fn post(_entry: Entry, _tx: &mut PgTx) -> Result<(), std::convert::Infallible> {
        Ok(())
    }

    /// A poison message, then a good one, of one key; `faults` on the
    /// source.
    async fn poison_then_after(
        faults: &Faults,
    ) -> (MemoryBroker, FaultySource<consumer::memory::MemorySource>) {
        let broker = MemoryBroker::new(1);
        let poison = Message::raw(&b"{not json"[..])
            .with_id("poison")
            .with_key("account-1");
        broker.publish("t", poison).await.expect("publish");
        let after = Message::raw(&br#"{"n":2}"#[..])
            .with_id("after")
            .with_key("account-1");
        broker.publish("t", after).await.expect("publish");
        let source = FaultySource::new(broker.source("t"), faults.clone());
        (broker, source)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_letter_nothing_takes_holds_its_key_and_is_not_run_again() {
        let h = PgHarness::new().await;
        // The store's table refuses every letter until the constraint goes.
        sqlx::query(
            "ALTER TABLE consumer_dead_letters ADD CONSTRAINT refuse_all CHECK (false) NOT VALID",
        )
        .execute(h.pool())
        .await
        .expect("a constraint that refuses every letter");
        let faults = Faults::new();
        faults.refuse_dead_letters(Some(BrokerErrorKind::NoDestination));
        let (broker, source) = poison_then_after(&faults).await;
        let consumer = Consumer::new(source, h.store(), post);
        let stats = consumer.stats();
        let drained = broker.clone();
        let run = tokio::spawn(consumer.run_until(async move { drained.wait_drained("t").await }));

        // Two tries of the letter, a second apart: held all along.
        let held = support::within(stats.wait_for(|s| s.settle_failures >= 2)).await;
        assert_eq!(
            (held.received, held.processed, held.dead_letters_stored),
            (2, 0, 0),
            "the poison message was not given back to fail again, and its key's \
             later message waits behind it: {held:?}"
        );

        sqlx::query("ALTER TABLE consumer_dead_letters DROP CONSTRAINT refuse_all")
            .execute(h.pool())
            .await
            .expect("the table takes letters again");
        support::within(run).await.expect("join").expect("consumer");

        let s = stats.snapshot();
        assert_eq!(
            (
                s.received,
                s.dead_poison,
                s.dead_letters_stored,
                s.processed
            ),
            (2, 1, 1, 1),
            "{s:?}"
        );
        let stored = h.stored_dead_letters().await;
        assert_eq!(stored.len(), 1, "{stored:#?}");
        assert_eq!(stored[0].message_id, "poison");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_letter_never_confirmed_goes_to_the_table_and_its_key_moves_on() {
        let h = PgHarness::new().await;
        let faults = Faults::new();
        faults.stall_dead_letters();
        let (broker, source) = poison_then_after(&faults).await;
        let consumer =
            Consumer::new(source, h.store(), post).with_settle_timeout(Duration::from_millis(300));
        let stats = consumer.stats();
        let drained = broker.clone();
        support::within(consumer.run_until(async move { drained.wait_drained("t").await }))
            .await
            .expect("consumer");

        let s = stats.snapshot();
        assert_eq!(
            (s.dead_poison, s.dead_letters_stored, s.processed),
            (1, 1, 1),
            "{s:?}"
        );
        let stored = h.stored_dead_letters().await;
        assert_eq!(stored.len(), 1, "{stored:#?}");
        assert!(
            stored[0].refusal.contains("did not answer"),
            "{}",
            stored[0].refusal
        );
    }
}

mod dead_letter_marks {
    //! The mark that a message was dead-lettered, written once the broker
    //! confirmed its letter, is tried again while the store cannot take it.
    //! Found by the fault campaign (seed 7 on RabbitMQ, 20 minutes): a
    //! PostgreSQL crash right after a poison message's letter was confirmed
    //! left the mark unwritten (told and left), so the store's record of
    //! what was dead-lettered missed a letter the broker held. Here a
    //! trigger refuses the mark twice with a serialization failure, a
    //! refusal that heals.

    use consumer::{Consumer, MemoryBroker, Message, PgTx, handler};

    use crate::conformance::support::{self, Harness, PgHarness};

    #[derive(Debug, thiserror::Error)]
    #[error("refused for good")]
    struct Refused;

    #[derive(serde::Deserialize)]
    struct Ping {}

    #[handler(retry = none, terminal = Refused)]
    async fn refuse(_ping: Ping, _tx: &mut PgTx) -> Result<(), Refused> {
        Err(Refused)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_mark_the_store_refuses_for_a_while_is_written_once_it_takes_it() {
        let h = PgHarness::new().await;
        for ddl in [
            "CREATE SEQUENCE mark_tries",
            "CREATE FUNCTION refuse_two_marks() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF nextval('mark_tries') <= 2 THEN \
             RAISE EXCEPTION 'the mark is refused for now' USING ERRCODE = '40001'; \
             END IF; RETURN NEW; END $$",
            "CREATE TRIGGER refuse_two_marks BEFORE INSERT OR UPDATE ON consumer_attempts \
             FOR EACH ROW WHEN (NEW.dead_lettered_at IS NOT NULL) \
             EXECUTE FUNCTION refuse_two_marks()",
        ] {
            sqlx::query(ddl)
                .execute(h.pool())
                .await
                .unwrap_or_else(|e| panic!("{ddl}: {e}"));
        }
        let broker = MemoryBroker::new(1);
        broker
            .publish("t", Message::raw(&b"{}"[..]).with_id("m-1"))
            .await
            .expect("publish");
        let consumer = Consumer::new(broker.source("t"), h.store(), refuse);
        let stats = consumer.stats();
        let drained = broker.clone();
        support::within(consumer.run_until(async move { drained.wait_drained("t").await }))
            .await
            .expect("consumer");

        assert_eq!(stats.snapshot().dead_terminal, 1);
        assert_eq!(broker.dead_letter_records("t").len(), 1);
        let tries: i64 = sqlx::query_scalar("SELECT last_value FROM mark_tries")
            .fetch_one(h.pool())
            .await
            .expect("tries");
        assert_eq!(tries, 3, "refused twice, written on the third try");
        let marked: bool = sqlx::query_scalar(
            "SELECT dead_lettered_at IS NOT NULL FROM consumer_attempts \
             WHERE handler = 'refuse' AND message_id = 'm-1'",
        )
        .fetch_optional(h.pool())
        .await
        .expect("the mark")
        .unwrap_or(false);
        assert!(marked, "the store knows the message was dead-lettered");
    }
}
