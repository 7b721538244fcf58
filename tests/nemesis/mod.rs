//! The fault campaign's parts (issue 35): the [history](history) the
//! processes record, the [checker](checker) that reads it, the
//! [workload](workload)'s processes, and the [nemesis](schedule) that
//! breaks them on a seeded schedule.

#![allow(dead_code)]

pub mod checker;
pub mod history;
