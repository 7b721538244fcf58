//! Test support shared by every test crate: the stores on real databases
//! with an `effects` table (`support`), the broker harnesses the
//! conformance suite (`tests/suite/`) drives (`broker`, `kafka`, `amqp`),
//! test messages, call logs, gates and the in-memory span exporter.

#![allow(dead_code)]

#[cfg(feature = "amqp")]
pub mod amqp;
#[cfg(feature = "amqp")]
pub mod amqp_partitioned;
pub mod broker;
#[cfg(feature = "jobs")]
pub mod jobs;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kinesis")]
pub mod kinesis;
pub mod links;
pub mod private_postgres;
pub mod retry_log;
pub mod scale_out;
#[cfg(feature = "sqs")]
pub mod sqs;
pub mod support;
