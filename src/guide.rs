// The guide: its pages are the markdown files of `docs/guide/`, pulled in
// here so that docs.rs renders them and every Rust block in them runs as a
// doctest. These modules hold no code. A page whose examples need a
// backend or the contract tooling is built with its feature.

#![doc = include_str!("../docs/guide/index.md")]

#[doc = include_str!("../docs/guide/getting_started.md")]
pub mod getting_started {}

#[doc = include_str!("../docs/guide/handlers.md")]
pub mod handlers {}

#[doc = include_str!("../docs/guide/semantics.md")]
pub mod semantics {}

#[doc = include_str!("../docs/guide/faults.md")]
pub mod faults {}

#[doc = include_str!("../docs/guide/router_and_service.md")]
pub mod router_and_service {}

#[doc = include_str!("../docs/guide/outbox.md")]
pub mod outbox {}

#[doc = include_str!("../docs/guide/batches.md")]
pub mod batches {}

#[doc = include_str!("../docs/guide/sagas.md")]
pub mod sagas {}

#[cfg_attr(all(feature = "jobs", feature = "sqlite"), doc = include_str!("../docs/guide/jobs.md"))]
#[cfg_attr(
    not(all(feature = "jobs", feature = "sqlite")),
    doc = "This page is built with the `jobs` and `sqlite` features (`cargo doc --all-features`)."
)]
pub mod jobs {}

#[cfg_attr(all(feature = "amqp", feature = "kafka"), doc = include_str!("../docs/guide/scale_out.md"))]
#[cfg_attr(
    not(all(feature = "amqp", feature = "kafka")),
    doc = "This page is built with the `amqp` and `kafka` features (`cargo doc --all-features`)."
)]
#[cfg_attr(docsrs, doc(cfg(all(feature = "amqp", feature = "kafka"))))]
pub mod scale_out {}

#[cfg_attr(feature = "asyncapi", doc = include_str!("../docs/guide/contracts.md"))]
#[cfg_attr(
    not(feature = "asyncapi"),
    doc = "This page is built with the `asyncapi` feature (`cargo doc --all-features`)."
)]
#[cfg_attr(docsrs, doc(cfg(feature = "asyncapi")))]
pub mod contracts {}

#[cfg_attr(feature = "testing", doc = include_str!("../docs/guide/testing.md"))]
#[cfg_attr(
    not(feature = "testing"),
    doc = "This page is built with the `testing` feature (`cargo doc --all-features`)."
)]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing {}

#[cfg_attr(feature = "registry", doc = include_str!("../docs/guide/registry.md"))]
#[cfg_attr(
    not(feature = "registry"),
    doc = "This page is built with the `registry` feature (`cargo doc --all-features`)."
)]
pub mod registry {}

#[doc = include_str!("../docs/guide/observability.md")]
pub mod observability {}

#[doc = include_str!("../docs/guide/operations.md")]
pub mod operations {}

#[doc = include_str!("../docs/guide/memory_broker.md")]
pub mod memory_broker {}

#[cfg_attr(feature = "amqp", doc = include_str!("../docs/guide/rabbitmq.md"))]
#[cfg_attr(
    not(feature = "amqp"),
    doc = "This page is built with the `amqp` feature (`cargo doc --all-features`)."
)]
#[cfg_attr(docsrs, doc(cfg(feature = "amqp")))]
pub mod rabbitmq {}

#[cfg_attr(feature = "amqp", doc = include_str!("../docs/guide/rabbitmq_partitions.md"))]
#[cfg_attr(
    not(feature = "amqp"),
    doc = "This page is built with the `amqp` feature (`cargo doc --all-features`)."
)]
#[cfg_attr(docsrs, doc(cfg(feature = "amqp")))]
pub mod rabbitmq_partitions {}

#[cfg_attr(feature = "kafka", doc = include_str!("../docs/guide/kafka.md"))]
#[cfg_attr(
    not(feature = "kafka"),
    doc = "This page is built with the `kafka` feature (`cargo doc --all-features`)."
)]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub mod kafka {}

#[cfg_attr(feature = "sqs", doc = include_str!("../docs/guide/sqs.md"))]
#[cfg_attr(
    not(feature = "sqs"),
    doc = "This page is built with the `sqs` feature (`cargo doc --all-features`)."
)]
#[cfg_attr(docsrs, doc(cfg(feature = "sqs")))]
pub mod sqs {}

#[cfg_attr(feature = "kinesis", doc = include_str!("../docs/guide/kinesis.md"))]
#[cfg_attr(
    not(feature = "kinesis"),
    doc = "This page is built with the `kinesis` feature (`cargo doc --all-features`)."
)]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub mod kinesis {}

#[cfg_attr(
    all(feature = "amqp", feature = "kafka", feature = "tls"),
    doc = include_str!("../docs/guide/secure_connections.md")
)]
#[cfg_attr(
    not(all(feature = "amqp", feature = "kafka", feature = "tls")),
    doc = "This page is built with the `amqp`, `kafka` and `tls` features (`cargo doc --all-features`)."
)]
#[cfg_attr(
    docsrs,
    doc(cfg(all(feature = "amqp", feature = "kafka", feature = "tls")))
)]
pub mod secure_connections {}
