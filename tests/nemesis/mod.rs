//! The fault campaign's parts (issue 35): the [history](history) the
//! processes record, the [checker](checker) that reads it (with its
//! [settlement rules](settlement_rules)), the [workload](workload)'s
//! processes and their [settlements](settlement), the nemesis' seeded
//! [schedule](schedule), and a [run](run) from start to report.

#![allow(dead_code)]

pub mod checker;
pub mod history;
pub mod run;
pub mod schedule;
pub mod settlement;
pub mod settlement_rules;
pub mod workload;
