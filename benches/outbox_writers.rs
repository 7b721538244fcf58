//! Where a writer's time goes when its transaction enqueues an outbox
//! event: the writers' bench of `benches/outbox.rs` (K writers, each
//! transaction `BEGIN; business INSERT; enqueue; COMMIT`, no relay), taken
//! apart into variants that each add or remove one thing.
//!
//! | variant | the transaction |
//! |---|---|
//! | `none` (baseline) | `BEGIN; INSERT orders; COMMIT` |
//! | `select1` | + `SELECT 1`: one more round trip that writes nothing |
//! | `second-insert` | + an `INSERT` into a second table shaped like `orders`: any second row |
//! | `outbox` | + `Outbox::new().enqueue` (the framework) |
//! | `hand` | + the framework's enqueue statement, verbatim, by hand (the same binds) |
//! | `hand-unprepared` | `hand`, the statement parsed and planned each time (`persistent(false)`) |
//! | `no-counter` | + a plain `INSERT` into the outbox table, no version-counter upsert |
//! | `no-indexes` | `hand` on an outbox table with its primary key only (no unique version index, no partial indexes) |
//! | `big-row` | `hand` with a 1 KiB payload, six headers and a trace context |
//! | `none-sync-off`, `hand-sync-off` | `none` and `hand` with `synchronous_commit = off`: what waiting for the WAL flush costs |
//!
//! Per variant: transactions per second (best of the rounds, ABBA order),
//! client CPU per transaction (this process), server CPU per transaction
//! (the writers' PostgreSQL backends, from `/proc/<pid>/schedstat`: needs
//! PostgreSQL on this machine, readable by this user, else `-`), and the WAL
//! each transaction's statements write (`EXPLAIN (ANALYZE, WAL)` over a
//! sample, which counts this session's records only; the commit record is
//! the same on every variant and left out). Each run gets a fresh
//! `bench_outbox_writers_*` schema, dropped afterwards.
//!
//! ```text
//! cargo bench --bench outbox_writers
//! cargo bench --bench outbox_writers -- none outbox hand     # some variants
//! BENCH_WRITERS=8 BENCH_WRITER_TX=1000 BENCH_ROUNDS=4 cargo bench --bench outbox_writers
//! ```

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use consumer::testing::FreshSchema;
use consumer::{NewEvent, Outbox};
use cpu_time::ProcessTime;
use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgConnection, PgPool, Postgres, Row as _};
use tokio::task::JoinSet;

const BUSINESS_INSERT: &str = "INSERT INTO orders (id, customer, cents) VALUES ($1, $2, $3)";
const SECOND_INSERT: &str = "INSERT INTO orders_2 (id, customer, cents) VALUES ($1, $2, $3)";
/// The framework's enqueue, verbatim (`ENQUEUE` in
/// `consumer-core/src/outbox/postgres.rs`, table `outbox_events`).
const ENQUEUE: &str = "WITH v AS ( \
       INSERT INTO outbox_events_aggregates AS a (aggregate_type, aggregate_id, last_version) VALUES ($2, $3, 1) \
       ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_version = a.last_version + 1 \
       RETURNING last_version) \
     INSERT INTO outbox_events (id, aggregate_type, aggregate_id, version, event_type, destination, payload, headers, trace_metadata) \
     SELECT $1::uuid, $2, $3, v.last_version, $4, $5, $6::jsonb, $7::jsonb, $8::jsonb FROM v";
/// The event row alone, its version given: no counter row.
const INSERT_EVENT: &str = "INSERT INTO outbox_events \
     (id, aggregate_type, aggregate_id, version, event_type, destination, payload, headers, trace_metadata) \
     VALUES ($1::uuid, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb)";
/// Aggregates per writer (each writer owns its own: no counter-row waits).
const AGGREGATES: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Variant {
    None,
    Select1,
    SecondInsert,
    Outbox,
    Hand,
    HandUnprepared,
    NoCounter,
    NoIndexes,
    BigRow,
    NoneSyncOff,
    HandSyncOff,
}

const ALL: [Variant; 11] = [
    Variant::None,
    Variant::Select1,
    Variant::SecondInsert,
    Variant::Outbox,
    Variant::Hand,
    Variant::HandUnprepared,
    Variant::NoCounter,
    Variant::NoIndexes,
    Variant::BigRow,
    Variant::NoneSyncOff,
    Variant::HandSyncOff,
];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::Select1 => "select1",
            Variant::SecondInsert => "second-insert",
            Variant::Outbox => "outbox",
            Variant::Hand => "hand",
            Variant::HandUnprepared => "hand-unprepared",
            Variant::NoCounter => "no-counter",
            Variant::NoIndexes => "no-indexes",
            Variant::BigRow => "big-row",
            Variant::NoneSyncOff => "none-sync-off",
            Variant::HandSyncOff => "hand-sync-off",
        }
    }

    fn sync_off(self) -> bool {
        matches!(self, Variant::NoneSyncOff | Variant::HandSyncOff)
    }
}

#[derive(Serialize)]
struct OrderPlaced<'a> {
    order: &'a str,
    n: u64,
    cents: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    note: String,
}

/// What one writer's transaction `i` writes.
struct Tx {
    order: String,
    aggregate: String,
    version: i64,
    n: u64,
}

impl Tx {
    fn new(w: usize, i: usize) -> anyhow::Result<Self> {
        Ok(Self {
            order: format!("w{w}-{i}"),
            aggregate: format!("w{w}-{}", i % AGGREGATES),
            version: i64::try_from(i / AGGREGATES + 1)?,
            n: u64::try_from(i)?,
        })
    }

    /// The event's payload (serialised in the transaction's loop, as
    /// `NewEvent::new` does on the framework's side).
    fn event(&self, note: &str) -> OrderPlaced<'_> {
        OrderPlaced {
            order: &self.order,
            n: self.n,
            cents: 1200,
            note: note.to_owned(),
        }
    }

    fn payload(&self, note: &str) -> anyhow::Result<String> {
        Ok(serde_json::to_string(&self.event(note))?)
    }
}

/// The headers and trace context of `big-row`.
struct Extras {
    note: String,
    headers: String,
    trace: String,
}

impl Extras {
    fn new() -> anyhow::Result<Self> {
        let headers: HashMap<&str, &str> = [
            ("ce_source", "/bench/orders"),
            ("ce_subject", "order"),
            ("content-type", "application/json"),
            ("tenant", "tenant-0042"),
            ("correlation-id", "5f0c6f3e-7a43-4b8e-9a8e-2d4c1f7b9e10"),
            ("causation-id", "0190c1d2-3e4f-7a8b-9c0d-1e2f3a4b5c6d"),
        ]
        .into_iter()
        .collect();
        Ok(Self {
            note: "x".repeat(1000),
            headers: serde_json::to_string(&headers)?,
            trace: serde_json::to_string(&HashMap::from([
                (
                    "traceparent",
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                ),
                ("tracestate", "vendor=opaque-value"),
            ]))?,
        })
    }
}

/// `sql`, or its `EXPLAIN (ANALYZE, WAL)` when sampling the WAL.
fn sql_of(sql: &str, explain: bool) -> AssertSqlSafe<String> {
    AssertSqlSafe(if explain {
        format!("EXPLAIN (ANALYZE, WAL, COSTS OFF, FORMAT JSON) {sql}")
    } else {
        sql.to_owned()
    })
}

type Query<'q> = sqlx::query::Query<'q, Postgres, <Postgres as sqlx::Database>::Arguments>;

/// The enqueue's binds, as `Outbox::enqueue` makes them (destination: the
/// aggregate type; no headers or trace unless given).
fn hand_binds<'q>(
    q: Query<'q>,
    tx: &Tx,
    note: Option<&str>,
    headers: Option<&str>,
    trace: Option<&str>,
) -> anyhow::Result<Query<'q>> {
    let payload = tx.payload(note.unwrap_or(""))?;
    Ok(q.bind(uuid::Uuid::now_v7().to_string())
        .bind("Order")
        .bind(tx.aggregate.clone())
        .bind("OrderPlaced")
        .bind("Order")
        .bind(payload)
        .bind(headers.map(str::to_owned))
        .bind(trace.map(str::to_owned)))
}

/// WAL written by a statement (its own records only).
#[derive(Debug, Default, Clone, Copy)]
struct WalUse {
    records: u64,
    fpi: u64,
    bytes: u64,
}

impl std::ops::AddAssign for WalUse {
    fn add_assign(&mut self, o: Self) {
        self.records += o.records;
        self.fpi += o.fpi;
        self.bytes += o.bytes;
    }
}

/// Runs `q`; under `explain`, reads the WAL its plan reports.
async fn run(q: Query<'_>, conn: &mut PgConnection, explain: bool) -> anyhow::Result<WalUse> {
    if !explain {
        q.execute(conn).await?;
        return Ok(WalUse::default());
    }
    let row = q.fetch_one(conn).await?;
    // EXPLAIN's column is `json`, whose binary form is its text.
    let text: String = row.try_get_unchecked(0)?;
    let plan: serde_json::Value = serde_json::from_str(&text)?;
    let top = &plan[0]["Plan"];
    let n = |k: &str| top[k].as_u64().unwrap_or(0);
    Ok(WalUse {
        records: n("WAL Records"),
        fpi: n("WAL FPI"),
        bytes: n("WAL Bytes"),
    })
}

/// The statements a variant adds after the business `INSERT`.
async fn extra(
    variant: Variant,
    t: &mut sqlx::Transaction<'_, Postgres>,
    outbox: &Outbox,
    extras: &Extras,
    tx: &Tx,
    explain: bool,
) -> anyhow::Result<WalUse> {
    let conn: &mut PgConnection = t;
    match variant {
        Variant::None | Variant::NoneSyncOff => Ok(WalUse::default()),
        Variant::Select1 => {
            sqlx::query("SELECT 1").execute(&mut *conn).await?;
            Ok(WalUse::default())
        }
        Variant::SecondInsert => {
            let q = sqlx::query(sql_of(SECOND_INSERT, explain))
                .bind(tx.order.clone())
                .bind(tx.aggregate.clone())
                .bind(1200i64);
            run(q, conn, explain).await
        }
        Variant::Outbox => {
            let event =
                NewEvent::new("Order", tx.aggregate.as_str(), "OrderPlaced", &tx.event(""))?;
            outbox.enqueue(t, event).await?;
            Ok(WalUse::default())
        }
        Variant::Hand | Variant::NoIndexes | Variant::HandSyncOff => {
            let q = hand_binds(sqlx::query(sql_of(ENQUEUE, explain)), tx, None, None, None)?;
            run(q, conn, explain).await
        }
        Variant::HandUnprepared => {
            let q = hand_binds(sqlx::query(sql_of(ENQUEUE, explain)), tx, None, None, None)?
                .persistent(false);
            run(q, conn, explain).await
        }
        Variant::BigRow => {
            let q = hand_binds(
                sqlx::query(sql_of(ENQUEUE, explain)),
                tx,
                Some(&extras.note),
                Some(&extras.headers),
                Some(&extras.trace),
            )?;
            run(q, conn, explain).await
        }
        Variant::NoCounter => {
            let q = sqlx::query(sql_of(INSERT_EVENT, explain))
                .bind(uuid::Uuid::now_v7().to_string())
                .bind("Order")
                .bind(tx.aggregate.clone())
                .bind(tx.version)
                .bind("OrderPlaced")
                .bind("Order")
                .bind(tx.payload("")?)
                .bind(None::<String>)
                .bind(None::<String>);
            run(q, conn, explain).await
        }
    }
}

/// One writer transaction; under `explain`, the WAL of its statements.
async fn transaction(
    variant: Variant,
    pool: &PgPool,
    outbox: &Outbox,
    extras: &Extras,
    tx: &Tx,
    explain: bool,
) -> anyhow::Result<WalUse> {
    let mut t = pool.begin().await?;
    let q = sqlx::query(sql_of(BUSINESS_INSERT, explain))
        .bind(tx.order.clone())
        .bind(tx.aggregate.clone())
        .bind(1200i64);
    let mut wal = run(q, &mut t, explain).await?;
    wal += extra(variant, &mut t, outbox, extras, tx, explain).await?;
    t.commit().await?;
    Ok(wal)
}

/// A fresh schema set up for `variant`, and a pool of `connections` all
/// open, with their backends' process ids.
struct Schema {
    fresh: FreshSchema,
    pool: PgPool,
    backends: Vec<i32>,
}

impl Schema {
    async fn create(variant: Variant, connections: u32) -> anyhow::Result<Self> {
        let fresh = FreshSchema::create("bench_outbox_writers", 1).await?;
        let mut options: PgConnectOptions = fresh.connect_options()?;
        if variant.sync_off() {
            options = options.options([("synchronous_commit", "off")]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .min_connections(connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await?;
        for sql in [
            "CREATE TABLE orders (id TEXT PRIMARY KEY, customer TEXT NOT NULL, cents BIGINT NOT NULL)",
            "CREATE TABLE orders_2 (id TEXT PRIMARY KEY, customer TEXT NOT NULL, cents BIGINT NOT NULL)",
        ] {
            sqlx::query(sql).execute(&pool).await?;
        }
        if variant == Variant::NoIndexes {
            sqlx::raw_sql(
                "ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_aggregate_type_aggregate_id_version_key; \
                 DROP INDEX outbox_events_unpublished; DROP INDEX outbox_events_published;",
            )
            .execute(&pool)
            .await
            .context("dropping the outbox's secondary indexes")?;
        }
        let mut held = Vec::new();
        let mut backends = Vec::new();
        for _ in 0..connections {
            let mut conn = pool.acquire().await?;
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut *conn)
                .await?;
            backends.push(pid);
            held.push(conn);
        }
        drop(held);
        Ok(Self {
            fresh,
            pool,
            backends,
        })
    }

    /// CPU time the backends have used so far, if this machine shows it.
    fn server_cpu(&self) -> Option<Duration> {
        let mut ns = 0u64;
        for pid in &self.backends {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
            ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        Some(Duration::from_nanos(ns))
    }

    async fn drop_schema(self) -> anyhow::Result<()> {
        self.pool.close().await;
        Ok(self.fresh.drop_schema().await?)
    }
}

/// What one timed run measured.
struct Measured {
    tps: f64,
    client_us: f64,
    server_us: Option<f64>,
}

async fn timed(variant: Variant, writers: usize, per_writer: usize) -> anyhow::Result<Measured> {
    let schema = Schema::create(variant, u32::try_from(writers)?).await?;
    let outbox = Outbox::new();
    let extras = std::sync::Arc::new(Extras::new()?);
    // Payloads and ids made before the clock starts, as far as they can be.
    let mut work = Vec::with_capacity(writers);
    for w in 0..writers {
        work.push(
            (0..per_writer)
                .map(|i| Tx::new(w, i))
                .collect::<anyhow::Result<Vec<_>>>()?,
        );
    }
    let server = schema.server_cpu();
    let cpu = ProcessTime::try_now()?;
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for txs in work {
        let (pool, outbox, extras) = (schema.pool.clone(), outbox.clone(), extras.clone());
        tasks.spawn(async move {
            for tx in &txs {
                transaction(variant, &pool, &outbox, &extras, tx, false).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let wall = start.elapsed();
    let client = cpu.try_elapsed()?;
    let server = match (server, schema.server_cpu()) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let done = writers * per_writer;
    let (orders, events): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox_events)",
    )
    .fetch_one(&schema.pool)
    .await?;
    let expected = match variant {
        Variant::None | Variant::NoneSyncOff | Variant::Select1 | Variant::SecondInsert => 0,
        _ => done,
    };
    if orders != i64::try_from(done)? || events != i64::try_from(expected)? {
        bail!(
            "{}: expected {done} orders and {expected} events, found {orders} and {events}",
            variant.name()
        );
    }
    schema.drop_schema().await?;
    let per_tx = |d: Duration| d.as_secs_f64() * 1e6 / done as f64;
    Ok(Measured {
        tps: done as f64 / wall.as_secs_f64(),
        client_us: per_tx(client),
        server_us: server.map(per_tx),
    })
}

/// The WAL of one transaction's statements, averaged over `sample`
/// transactions on one connection after as many to warm up.
async fn wal_per_tx(variant: Variant, sample: usize) -> anyhow::Result<(f64, f64, f64)> {
    if variant == Variant::Outbox {
        // Its statement is `hand`'s; the framework runs it without EXPLAIN.
        return Ok((f64::NAN, f64::NAN, f64::NAN));
    }
    let schema = Schema::create(variant, 1).await?;
    let outbox = Outbox::new();
    let extras = Extras::new()?;
    let mut total = WalUse::default();
    for i in 0..2 * sample {
        let tx = Tx::new(0, i)?;
        let wal = transaction(variant, &schema.pool, &outbox, &extras, &tx, i >= sample).await?;
        total += wal;
    }
    schema.drop_schema().await?;
    let n = sample as f64;
    Ok((
        total.bytes as f64 / n,
        total.records as f64 / n,
        total.fpi as f64 / n,
    ))
}

fn main() -> anyhow::Result<()> {
    let var = |name: &str, default: usize| -> anyhow::Result<usize> {
        match std::env::var(name) {
            Ok(v) => v
                .parse()
                .with_context(|| format!("{name} must be a number, not {v:?}")),
            Err(_) => Ok(default),
        }
    };
    let writers = var("BENCH_WRITERS", 8)?;
    let per_writer = var("BENCH_WRITER_TX", 1_000)?;
    let rounds = var("BENCH_ROUNDS", 4)?;
    if writers == 0 || per_writer == 0 || rounds == 0 {
        bail!("BENCH_WRITERS, BENCH_WRITER_TX and BENCH_ROUNDS must be at least 1");
    }
    let mut variants = Vec::new();
    for arg in std::env::args().skip(1) {
        // `cargo bench` appends `--bench`.
        if arg == "--bench" {
            continue;
        }
        match ALL.iter().find(|v| v.name() == arg) {
            Some(v) => variants.push(*v),
            None => bail!(
                "unknown variant {arg:?}; accepted: {}",
                ALL.map(Variant::name).join(", ")
            ),
        }
    }
    if variants.is_empty() {
        variants = ALL.to_vec();
    }
    if !variants.contains(&Variant::None) {
        variants.insert(0, Variant::None);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "outbox writers: {writers} writers x {per_writer} transactions on PostgreSQL at {}, \
         best of {rounds} rounds (ABBA); load average at start: {}",
        consumer::testing::database_url(),
        load_average()
    );
    let mut runs: HashMap<Variant, Vec<Measured>> = HashMap::new();
    rt.block_on(async {
        for round in 0..rounds {
            let order: Vec<Variant> = if round % 2 == 0 {
                variants.clone()
            } else {
                variants.iter().rev().copied().collect()
            };
            for v in order {
                let m = timed(v, writers, per_writer).await?;
                runs.entry(v).or_default().push(m);
            }
        }
        anyhow::Ok(())
    })?;
    let mut wal = HashMap::new();
    rt.block_on(async {
        for v in &variants {
            wal.insert(*v, wal_per_tx(*v, 200).await?);
        }
        anyhow::Ok(())
    })?;
    let best = |v: Variant| runs[&v].iter().map(|m| m.tps).fold(0.0_f64, f64::max);
    let least = |xs: Vec<f64>| xs.into_iter().fold(f64::INFINITY, f64::min);
    let base = best(Variant::None);
    println!();
    println!(
        "| variant | tx/s | vs none | client CPU µs/tx | server CPU µs/tx | WAL B/tx (statements) | WAL records/tx | tx/s per round |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for v in &variants {
        let rs = &runs[v];
        let server = least(rs.iter().filter_map(|m| m.server_us).collect());
        let (bytes, records, fpi) = wal[v];
        println!(
            "| {} | {:.0} | {:.2}× | {:.1} | {} | {} | {} | {} |",
            v.name(),
            best(*v),
            best(*v) / base,
            least(rs.iter().map(|m| m.client_us).collect()),
            if server.is_finite() {
                format!("{server:.1}")
            } else {
                "-".to_owned()
            },
            if bytes.is_nan() {
                "as hand".to_owned()
            } else {
                format!(
                    "{bytes:.0}{}",
                    if fpi > 0.0 {
                        format!(" ({fpi:.2} FPI)")
                    } else {
                        String::new()
                    }
                )
            },
            if records.is_nan() {
                "as hand".to_owned()
            } else {
                format!("{records:.1}")
            },
            rs.iter()
                .map(|m| format!("{:.0}", m.tps))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    println!();
    println!(
        "CPU: least over the rounds; server CPU is the writers' backends only (not the WAL writer or checkpointer)"
    );
    Ok(())
}

/// The machine is shared: a busy one moves every figure, so say how busy.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}
