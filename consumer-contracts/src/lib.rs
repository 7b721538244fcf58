//! Contract tooling of the `consumer` framework, generated from what a
//! service runs rather than written beside it:
//!
//! * [`asyncapi`]: the service's AsyncAPI 3.1 document (channels,
//!   operations, CloudEvents headers, payload schemas in draft-07);
//! * payload schemas per event type and serde contract, as snapshots to
//!   commit ([`asyncapi::write_current`]);
//! * [`compat`]: schema-evolution checks (BACKWARD / FORWARD / FULL,
//!   transitive) of the current schemas against those snapshots, after
//!   Confluent Schema Registry's rules.
//!
//! Everything starts from a [`Service`](consumer_core::Service)'s description of its parts; the
//! [`ServiceContracts`] extension gives the service its document, its
//! schemas and an endpoint that serves the document:
//!
//! ```
//! use consumer_contracts::ServiceContracts;
//! # fn demo(service: consumer_core::Service) -> Result<(), Box<dyn std::error::Error>> {
//! let document = service.asyncapi()?;
//! assert_eq!(document["asyncapi"], "3.1.0");
//! # Ok(())
//! # }
//! ```
//!
//! Applications reach this crate as `consumer::contracts` (feature
//! `asyncapi`); the `consumer` CLI uses it for `consumer schema check`.

pub mod asyncapi;
pub mod compat;
mod service;

pub use service::ServiceContracts;
