//! The fault campaign, short form (issue 35).

mod nemesis;
