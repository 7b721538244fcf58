//! `consumer`: the operator's tool for the consumer framework's dead
//! letters, outbox and dedup store.
//!
//! ```text
//! consumer dead-letters list --queue orders.dlq --group-by error
//! consumer dead-letters show 3f9a1c0be27d --queue orders.dlq
//! consumer dead-letters replay --queue orders.dlq --handler charge --canary 1 --rate 50
//! consumer outbox status
//! consumer dedup purge --older-than 7days
//! consumer sagas list --status compensation_failed
//! consumer sagas show order-fulfilment order-4
//! consumer sagas resume order-fulfilment order-4
//! consumer jobs list --queue emails --state retrying
//! consumer jobs pause emails --reason "provider outage"
//! consumer held-keys list --handler apply_ledger_entry
//! consumer held-keys release apply_ledger_entry account-7
//! consumer kinesis shards --application billing --stream orders
//! consumer schema check --snapshots contracts/deserialize --current target/contracts/deserialize
//! consumer console --listen 127.0.0.1:9700
//! ```
//!
//! Addresses come from `--database-url` / `DATABASE_URL`, `--schema` /
//! `CONSUMER_SCHEMA`, `--amqp-url` / `AMQP_URL` and `--kafka-brokers` /
//! `KAFKA_BROKERS`; certificates and credentials from the flags of
//! [`args::SecurityArgs`] (the guide's "Connecting securely" page). Exit
//! codes are listed in [`error`].

// Without a broker feature only the table, the outbox and dedup work; the
// broker paths are compiled out and their shared pieces go unused.
#![cfg_attr(
    not(any(feature = "amqp", feature = "kafka")),
    allow(dead_code, unused_variables)
)]

mod args;
mod audit;
mod console;
mod database;
mod dead_letters;
mod dedup;
mod error;
mod handler_state;
mod held_keys;
mod jobs;
mod journal;
mod json;
#[cfg(feature = "kinesis")]
mod kinesis;
mod letter;
mod outbox;
mod pauses;
mod places;
mod progress;
mod render;
mod replay;
mod route;
mod sagas;
mod schema;
mod schema_registry;
mod security;

use std::io::{BufReader, Write};
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command, DeadLetters, Dedup, HeldKeys, Outbox, Sagas, Schema, Services};
use crate::error::{Error, Result, exit};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let services = &cli.services;
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let out = &mut lock;
    match cli.command {
        Command::DeadLetters(cmd) => run_dead_letters(services, *cmd, out).await,
        Command::Outbox(cmd) => run_outbox(services, cmd, out).await,
        Command::Dedup(cmd) => match cmd {
            Dedup::Counts { json } => dedup::counts(services, json, out).await,
            Dedup::Purge { older_than, batch } => {
                dedup::purge(services, older_than, batch, out).await
            }
        },
        Command::Sagas(cmd) => run_sagas(services, cmd, out).await,
        Command::Jobs(cmd) => run_jobs(services, cmd, out).await,
        Command::HeldKeys(cmd) => match cmd {
            HeldKeys::List {
                handler,
                limit,
                json,
            } => held_keys::list(services, handler.as_deref(), limit, json, out).await,
            HeldKeys::Release { handler, key } => {
                held_keys::release(services, &handler, &key, false, out).await
            }
            HeldKeys::Skip { handler, key } => {
                held_keys::release(services, &handler, &key, true, out).await
            }
        },
        #[cfg(feature = "kinesis")]
        Command::Kinesis(cmd) => match cmd {
            args::Kinesis::Shards { reading, json } => {
                kinesis::shards(services, &reading, json, out).await
            }
            args::Kinesis::Checkpoint {
                reading,
                shard,
                to,
                to_start: _,
                dry_run,
            } => {
                let to = kinesis::target(to.as_deref())?;
                kinesis::checkpoint(services, &reading, &shard, to, dry_run, out).await
            }
        },
        Command::Pause {
            handler,
            reason,
            by,
        } => pauses::pause(services, &handler, by, &reason, out).await,
        Command::Resume { handler } => pauses::resume(services, &handler, out).await,
        Command::Paused { json } => pauses::list(services, json, out).await,
        Command::Schema(cmd) => match cmd {
            Schema::Check(args) => schema::check(&args, out),
            Schema::Record(args) => schema::record(&args, out),
            Schema::RegistryCheck(args) => schema_registry::check(&args, out).await,
        },
        Command::Console(args) => console::run(services, &args, out).await,
    }
}

async fn run_dead_letters(
    services: &Services,
    cmd: DeadLetters,
    out: &mut impl Write,
) -> Result<()> {
    match cmd {
        DeadLetters::List {
            place,
            filter,
            group_by,
            json,
        } => dead_letters::list(services, &place, &filter, group_by, json, out).await,
        DeadLetters::Show { id, place, json } => {
            dead_letters::show(services, &place, &id, json, out).await
        }
        DeadLetters::Export {
            place,
            filter,
            output,
        } => {
            let n = match output {
                Some(path) => {
                    let file = std::fs::File::create(&path)
                        .map_err(Error::io(format!("creating {}", path.display())))?;
                    let mut file = std::io::BufWriter::new(file);
                    dead_letters::export(services, &place, &filter, &mut file).await?
                }
                None => dead_letters::export(services, &place, &filter, out).await?,
            };
            eprintln!("exported {n} dead letter(s)");
            Ok(())
        }
        DeadLetters::Import { place, input } => {
            let n = match input {
                Some(path) => {
                    let file = std::fs::File::open(&path)
                        .map_err(Error::io(format!("opening {}", path.display())))?;
                    dead_letters::import(services, &place, BufReader::new(file)).await?
                }
                None => dead_letters::import(services, &place, std::io::stdin().lock()).await?,
            };
            writeln!(out, "imported {n} dead letter(s)").map_err(Error::io("writing the output"))
        }
        DeadLetters::Purge { place, filter, yes } => {
            dead_letters::purge(services, &place, &filter, yes, out)
                .await
                .map(|_| ())
        }
        DeadLetters::Replay(args) => replay::run(services, &args, out).await,
    }
}

async fn run_outbox(services: &Services, cmd: Outbox, out: &mut impl Write) -> Result<()> {
    match cmd {
        Outbox::Status {
            json,
            next,
            outbox_table,
        } => outbox::status(services, &outbox_table, json, next, out).await,
        Outbox::Retry {
            aggregate,
            all,
            outbox_table,
        } => outbox::retry(services, &outbox_table, aggregate.as_deref(), all, out).await,
    }
}

async fn run_jobs(services: &Services, cmd: args::Jobs, out: &mut impl Write) -> Result<()> {
    match cmd {
        args::Jobs::List {
            queue,
            state,
            limit,
            json,
        } => jobs::list(services, queue.as_deref(), state, limit, json, out).await,
        args::Jobs::Show { id, json } => jobs::show(services, &id, json, out).await,
        args::Jobs::Retry { queue, id } => jobs::retry(services, &queue, &id, out).await,
        args::Jobs::Cancel { queue, id } => jobs::cancel(services, &queue, &id, out).await,
        args::Jobs::Pause { queue, reason, by } => {
            jobs::pause(services, &queue, by, &reason, out).await
        }
        args::Jobs::Resume { queue } => jobs::resume(services, &queue, out).await,
        args::Jobs::Paused { json } => jobs::paused(services, json, out).await,
    }
}

async fn run_sagas(services: &Services, cmd: Sagas, out: &mut impl Write) -> Result<()> {
    match cmd {
        Sagas::List {
            filter,
            limit,
            json,
        } => sagas::list(services, &filter, limit, json, out).await,
        Sagas::Show {
            saga_type,
            saga_id,
            json,
        } => sagas::show(services, &saga_type, &saga_id, json, out).await,
        Sagas::Resume {
            saga_type,
            saga_id,
            compensate,
        } => sagas::resume(services, &saga_type, &saga_id, compensate.as_deref(), out).await,
        Sagas::Abandon {
            saga_type,
            saga_id,
            reason,
        } => sagas::abandon(services, &saga_type, &saga_id, &reason, out).await,
    }
}
