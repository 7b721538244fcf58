//! [`SqlLeaseStore`] on a real PostgreSQL (needs PostgreSQL: `DATABASE_URL`,
//! by default postgres://postgres@127.0.0.1:5432/test; `scripts/services
//! postgres` starts it; each test works in a schema of its own and drops
//! it) and on SQLite (in memory): the same rules as the in-memory store,
//! each transition atomic, times in the database's clock.

use std::time::{Duration, SystemTime};

use consumer_core::sql::Dialect;
use consumer_core::testing::FreshSchema;
use consumer_kinesis::lease::{Checkpoint, CheckpointWrite, LeaseStore, balance};
use consumer_kinesis_store::SqlLeaseStore;

const SHARD: &str = "shardId-000000000000";

fn later(ms: u64) -> SystemTime {
    SystemTime::now() + Duration::from_millis(ms)
}

async fn postgres() -> FreshSchema {
    FreshSchema::create("ct_kinesis", 4)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn sqlite() -> sqlx::SqlitePool {
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .expect("in-memory SQLite")
}

/// Takes, renewals, steals and releases: of two instances racing for a
/// lease exactly one wins, a lost lease is not renewed.
async fn lease_rules<DB: Dialect>(store: SqlLeaseStore<DB>) {
    store.migrate().await.expect("migrations");
    store
        .migrate()
        .await
        .expect("a second migration changes nothing");
    store.ensure(&[SHARD.to_owned()]).await.expect("ensure");
    store
        .ensure(&[SHARD.to_owned()])
        .await
        .expect("ensure twice");
    let leases = store.leases().await.expect("leases");
    assert_eq!(leases.len(), 1);
    let seen = leases[0].clone();
    assert_eq!((seen.owner.as_deref(), seen.counter), (None, 0));
    let a = store
        .take(SHARD, "a", seen.counter, later(60_000), false)
        .await
        .expect("take")
        .expect("a free lease");
    assert_eq!((a.owner.as_deref(), a.counter), (Some("a"), 1));
    assert!(a.is_held_by("a", SystemTime::now()));
    assert!(
        store
            .take(SHARD, "b", seen.counter, later(60_000), false)
            .await
            .expect("take")
            .is_none(),
        "b saw counter 0, it is 1"
    );
    assert!(
        store
            .take(SHARD, "b", a.counter, later(60_000), false)
            .await
            .expect("take")
            .is_none(),
        "held by a"
    );
    let renewed = store
        .renew(SHARD, "a", later(60_000))
        .await
        .expect("renew")
        .expect("held");
    assert_eq!(renewed.counter, 2);
    let b = store
        .take(SHARD, "b", renewed.counter, later(60_000), true)
        .await
        .expect("steal")
        .expect("a steal with the counter seen wins");
    assert_eq!(b.owner.as_deref(), Some("b"));
    assert!(
        store
            .renew(SHARD, "a", later(60_000))
            .await
            .expect("renew")
            .is_none(),
        "a lost it"
    );
    assert!(
        !store.release(SHARD, "a").await.expect("release"),
        "not a's"
    );
    assert!(store.release(SHARD, "b").await.expect("release"));
    let free = store.leases().await.expect("leases").remove(0);
    assert!(!free.is_held_at(SystemTime::now()), "{free:?}");
}

/// Only the owner checkpoints, never backwards, and the shard's end comes
/// after every sequence number.
async fn checkpoint_rules<DB: Dialect>(store: SqlLeaseStore<DB>) {
    store.migrate().await.expect("migrations");
    store.ensure(&[SHARD.to_owned()]).await.expect("ensure");
    let at = |s: &str| Checkpoint::At(s.to_owned());
    assert_eq!(
        store.checkpoint(SHARD, "a", at("5")).await.expect("write"),
        CheckpointWrite::NotOwner,
        "nobody holds it"
    );
    store
        .take(SHARD, "a", 0, later(60_000), false)
        .await
        .expect("take")
        .expect("free");
    assert_eq!(
        store.checkpoint(SHARD, "b", at("5")).await.expect("write"),
        CheckpointWrite::NotOwner
    );
    assert_eq!(
        store.checkpoint(SHARD, "a", at("10")).await.expect("write"),
        CheckpointWrite::Written
    );
    assert_eq!(
        store.checkpoint(SHARD, "a", at("9")).await.expect("write"),
        CheckpointWrite::Behind,
        "9 < 10 by value"
    );
    let long = "49590338271490256608559692538361571095921575989136588898";
    assert_eq!(
        store.checkpoint(SHARD, "a", at(long)).await.expect("write"),
        CheckpointWrite::Written
    );
    assert_eq!(
        store.checkpoint_of(SHARD).await.expect("read"),
        Some(at(long))
    );
    assert_eq!(
        store
            .checkpoint(SHARD, "a", Checkpoint::ShardEnd)
            .await
            .expect("write"),
        CheckpointWrite::Written
    );
    assert_eq!(
        store.checkpoint_of(SHARD).await.expect("read"),
        Some(Checkpoint::ShardEnd)
    );
    assert_eq!(store.checkpoint_of("shardId-9").await.expect("read"), None);
}

/// A lease not renewed expires in the database's clock and is taken; the
/// rows of another application or stream are its own.
async fn expiry_and_isolation<DB: Dialect>(store: SqlLeaseStore<DB>, other_app: SqlLeaseStore<DB>) {
    store.migrate().await.expect("migrations");
    store.ensure(&[SHARD.to_owned()]).await.expect("ensure");
    other_app.ensure(&[SHARD.to_owned()]).await.expect("ensure");
    let a = store
        .take(SHARD, "a", 0, later(300), false)
        .await
        .expect("take")
        .expect("free");
    let other = other_app
        .take(SHARD, "x", 0, later(60_000), false)
        .await
        .expect("take");
    assert!(other.is_some(), "another application's lease is its own");
    // Waiting for a lease to expire is what is tested here.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let leases = store.leases().await.expect("leases");
    let moves = balance::moves(&leases, "b", SystemTime::now());
    assert_eq!(moves.take.len(), 1, "the expired lease is free: {leases:?}");
    let b = store
        .take(SHARD, "b", a.counter, later(60_000), false)
        .await
        .expect("take")
        .expect("expired");
    assert_eq!(b.owner.as_deref(), Some("b"));
    assert!(
        store
            .renew(SHARD, "a", later(1000))
            .await
            .expect("renew")
            .is_none()
    );
    let x = other_app.leases().await.expect("leases").remove(0);
    assert_eq!(x.owner.as_deref(), Some("x"));
}

#[tokio::test]
async fn postgres_lease_transitions_are_atomic_and_a_lost_lease_is_not_renewed() {
    let schema = postgres().await;
    lease_rules(SqlLeaseStore::new(schema.pool.clone(), "app", "orders")).await;
    schema.drop_schema().await.expect("drop the test schema");
}

#[tokio::test]
async fn postgres_only_the_owner_checkpoints_and_never_backwards() {
    let schema = postgres().await;
    checkpoint_rules(SqlLeaseStore::new(schema.pool.clone(), "app", "orders")).await;
    schema.drop_schema().await.expect("drop the test schema");
}

#[tokio::test]
async fn postgres_an_expired_lease_is_taken_and_applications_are_apart() {
    let schema = postgres().await;
    expiry_and_isolation(
        SqlLeaseStore::new(schema.pool.clone(), "app", "orders"),
        SqlLeaseStore::new(schema.pool.clone(), "other", "orders"),
    )
    .await;
    schema.drop_schema().await.expect("drop the test schema");
}

#[tokio::test]
async fn sqlite_lease_transitions_are_atomic_and_a_lost_lease_is_not_renewed() {
    lease_rules(SqlLeaseStore::new(sqlite().await, "app", "orders")).await;
}

#[tokio::test]
async fn sqlite_only_the_owner_checkpoints_and_never_backwards() {
    checkpoint_rules(SqlLeaseStore::new(sqlite().await, "app", "orders")).await;
}

#[tokio::test]
async fn sqlite_an_expired_lease_is_taken_and_applications_are_apart() {
    let pool = sqlite().await;
    expiry_and_isolation(
        SqlLeaseStore::new(pool.clone(), "app", "orders"),
        SqlLeaseStore::new(pool, "app", "payments"),
    )
    .await;
}

/// What an operator reads and moves: every shard with its owner and
/// checkpoint; a checkpoint moved (or shown on a dry run) only while no live
/// instance holds the lease, and back to the start position.
async fn operator_rules<DB: Dialect>(store: SqlLeaseStore<DB>) {
    const OTHER: &str = "shardId-000000000001";
    store.migrate().await.expect("migrations");
    store
        .ensure(&[SHARD.to_owned(), OTHER.to_owned()])
        .await
        .expect("ensure");
    let held = store
        .take(SHARD, "i-1", 0, later(60_000), false)
        .await
        .expect("take")
        .expect("a free lease");
    assert_eq!(
        store
            .checkpoint(SHARD, "i-1", Checkpoint::At("17".into()))
            .await
            .expect("checkpoint"),
        CheckpointWrite::Written
    );

    let shards = store.shards().await.expect("shards");
    assert_eq!(shards.len(), 2);
    assert_eq!(shards[0].lease, held);
    assert_eq!(
        (shards[0].leased, shards[0].checkpoint.clone()),
        (true, Some(Checkpoint::At("17".into())))
    );
    assert_eq!(
        (shards[1].leased, shards[1].checkpoint.clone()),
        (false, None)
    );

    match store.move_checkpoint(SHARD, None, true).await {
        Err(consumer_kinesis_store::Error::Leased { owner, .. }) => assert_eq!(owner, "i-1"),
        other => {
            panic!("a leased shard's checkpoint is not moved, not even on a dry run: {other:?}")
        }
    }
    let to = Some(Checkpoint::At("100".into()));
    let shown = store
        .move_checkpoint(OTHER, to.clone(), true)
        .await
        .expect("a dry run");
    assert_eq!(
        (shown.from.clone(), shown.to.clone(), shown.written),
        (None, to.clone(), false)
    );
    assert_eq!(
        store.checkpoint_of(OTHER).await.expect("read"),
        None,
        "a dry run writes nothing"
    );
    let moved = store
        .move_checkpoint(OTHER, to.clone(), false)
        .await
        .expect("a move");
    assert!(moved.written);
    assert_eq!(store.checkpoint_of(OTHER).await.expect("read"), to);
    let back = store
        .move_checkpoint(OTHER, None, false)
        .await
        .expect("back to the start");
    assert_eq!((back.from, back.to), (to, None));
    assert_eq!(store.checkpoint_of(OTHER).await.expect("read"), None);

    // Once the owner lets go, its shard can be moved too.
    assert!(store.release(SHARD, "i-1").await.expect("release"));
    let moved = store
        .move_checkpoint(SHARD, Some(Checkpoint::At("5".into())), false)
        .await
        .expect("a released shard moves");
    assert_eq!(moved.from, Some(Checkpoint::At("17".into())));
    assert!(matches!(
        store.move_checkpoint("shardId-9", None, true).await,
        Err(consumer_kinesis_store::Error::NoSuchShard { .. })
    ));
}

#[tokio::test]
async fn postgres_an_operator_sees_every_shard_and_moves_a_checkpoint_only_when_unleased() {
    let schema = postgres().await;
    operator_rules(SqlLeaseStore::new(schema.pool.clone(), "app", "orders")).await;
    schema.drop_schema().await.expect("drop the test schema");
}

#[tokio::test]
async fn sqlite_an_operator_sees_every_shard_and_moves_a_checkpoint_only_when_unleased() {
    operator_rules(SqlLeaseStore::new(sqlite().await, "app", "orders")).await;
}
