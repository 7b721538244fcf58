//! Avro through a real schema registry (Apicurio Registry's
//! Confluent-compatible API, which `scripts/services registry` starts;
//! REGISTRY_URL points at another). Each test uses subjects of its own, so
//! reruns against the same registry do not collide.

use consumer_codec::avro::{AvroDecoder, AvroEncoder};
use consumer_codec::registry::{Compatibility, RegistryClient, RegistryConfig, Schema, Version};
use consumer_codec::subject::{MessagePart, SubjectNameStrategy};
use consumer_codec::wire::{decode_frame, encode_frame};
use consumer_codec::{Error, WireError};
use serde::{Deserialize, Serialize};

const ORDER_V1: &str = r#"{"type": "record", "name": "OrderPlaced", "namespace": "shop",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"}]}"#;

// BACKWARD: a field added with a default.
const ORDER_V2: &str = r#"{"type": "record", "name": "OrderPlaced", "namespace": "shop",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"},
             {"name": "currency", "type": "string", "default": "EUR"}]}"#;

// Not BACKWARD: a field added without a default cannot be read from v2 data.
const ORDER_V3: &str = r#"{"type": "record", "name": "OrderPlaced", "namespace": "shop",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"},
             {"name": "currency", "type": "string", "default": "EUR"}, {"name": "vat", "type": "long"}]}"#;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderV1 {
    id: String,
    amount: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderV2 {
    id: String,
    amount: i64,
    currency: String,
}

fn registry_url() -> String {
    std::env::var("REGISTRY_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".to_owned())
}

/// A client of the test registry, which must answer: a missing registry
/// fails the test with what to do.
async fn registry() -> RegistryClient {
    let url = registry_url();
    let client =
        RegistryClient::new(RegistryConfig::new(&url)).expect("the registry URL is an http:// URL");
    match client
        .subject_version(&unique("probe"), Version::Latest)
        .await
    {
        Err(Error::NotFound { .. }) => client,
        Err(e) if e.is_transient() => panic!(
            "Apicurio Registry is not reachable at {url} ({e}): run `scripts/services registry` or set REGISTRY_URL"
        ),
        other => panic!(
            "the registry at {url} answered a probe for a subject that cannot exist with {other:?}"
        ),
    }
}

fn unique(what: &str) -> String {
    format!("codec-{what}-{}", uuid::Uuid::new_v4().simple())
}

fn order() -> OrderV1 {
    OrderV1 {
        id: "o-1".to_owned(),
        amount: 4200,
    }
}

#[tokio::test]
async fn a_record_encoded_under_its_topic_subject_decodes_into_the_type() {
    let registry = registry().await;
    let topic = unique("orders");
    let encoder = AvroEncoder::for_topic(
        registry.clone(),
        SubjectNameStrategy::TopicName,
        &topic,
        MessagePart::Value,
        ORDER_V1,
    )
    .expect("the v1 schema parses")
    .with_auto_register(true);
    assert_eq!(encoder.subject(), format!("{topic}-value"));

    let bytes = encoder
        .encode(&order())
        .await
        .expect("the registry registers v1 and the order fits it");
    let schema_id = encoder
        .schema_id()
        .await
        .expect("the id is known once encoded");
    assert_eq!(
        decode_frame(&bytes).expect("a framed payload").schema_id,
        schema_id
    );

    let decoder = AvroDecoder::new(registry.clone(), ORDER_V1).expect("the v1 schema parses");
    let decoded: OrderV1 = decoder
        .decode(&bytes)
        .await
        .expect("the payload decodes with its own schema");
    assert_eq!(decoded, order());

    let latest = registry
        .subject_version(encoder.subject(), Version::Latest)
        .await
        .expect("the subject exists after registering");
    assert_eq!((latest.id, latest.version), (schema_id, 1));
}

#[tokio::test]
async fn without_auto_registration_only_a_registered_schema_is_produced() {
    let registry = registry().await;
    let subject = unique("orders-value");
    let encoder =
        AvroEncoder::new(registry.clone(), &subject, ORDER_V1).expect("the v1 schema parses");
    let error = encoder
        .encode(&order())
        .await
        .expect_err("nothing is registered under the subject");
    assert!(matches!(error, Error::NotFound { .. }), "{error}");
    assert!(!error.is_poison() && !error.is_transient(), "{error}");

    let id = registry
        .register(&subject, &Schema::avro(ORDER_V1))
        .await
        .expect("v1 registers");
    let encoder = AvroEncoder::new(registry, &subject, ORDER_V1).expect("the v1 schema parses");
    let bytes = encoder
        .encode(&order())
        .await
        .expect("the schema is found by lookup");
    assert_eq!(
        decode_frame(&bytes).expect("a framed payload").schema_id,
        id
    );
}

#[tokio::test]
async fn a_v1_reader_reads_v2_records_under_backward_and_an_incompatible_v3_is_refused() {
    let registry = registry().await;
    let subject = unique("orders-value");
    let v1 = registry
        .register(&subject, &Schema::avro(ORDER_V1))
        .await
        .expect("v1 registers");
    registry
        .set_compatibility(&subject, Compatibility::Backward)
        .await
        .expect("the registry takes a subject's compatibility rule");

    let check = registry
        .check_compatibility(&subject, &Schema::avro(ORDER_V2))
        .await
        .expect("the registry checks v2");
    assert!(
        check.is_compatible,
        "v2 adds a field with a default: {check:?}"
    );
    let v2_encoder = AvroEncoder::new(registry.clone(), &subject, ORDER_V2)
        .expect("the v2 schema parses")
        .with_auto_register(true);
    let v2_order = OrderV2 {
        id: "o-2".to_owned(),
        amount: 99,
        currency: "CHF".to_owned(),
    };
    let bytes = v2_encoder
        .encode(&v2_order)
        .await
        .expect("v2 registers under BACKWARD");
    let v2 = v2_encoder.schema_id().await.expect("v2 has an id");
    assert_ne!(v1, v2);

    let v1_reader = AvroDecoder::new(registry.clone(), ORDER_V1).expect("the v1 schema parses");
    let read: OrderV1 = v1_reader
        .decode(&bytes)
        .await
        .expect("a v1 reader reads a v2 record");
    assert_eq!(
        read,
        OrderV1 {
            id: "o-2".to_owned(),
            amount: 99
        }
    );

    let v1_bytes = AvroEncoder::new(registry.clone(), &subject, ORDER_V1)
        .expect("the v1 schema parses")
        .encode(&order())
        .await
        .expect("v1 is still registered");
    let v2_reader = AvroDecoder::new(registry.clone(), ORDER_V2).expect("the v2 schema parses");
    let read: OrderV2 = v2_reader
        .decode(&v1_bytes)
        .await
        .expect("a v2 reader reads a v1 record");
    assert_eq!(
        read.currency, "EUR",
        "the reader's default fills the field v1 lacks"
    );

    let check = registry
        .check_compatibility(&subject, &Schema::avro(ORDER_V3))
        .await
        .expect("the registry checks v3");
    assert!(
        !check.is_compatible,
        "v3 adds a field without a default: {check:?}"
    );
    let error = registry
        .register(&subject, &Schema::avro(ORDER_V3))
        .await
        .expect_err("the registry refuses v3 under BACKWARD");
    assert!(
        matches!(&error, Error::Incompatible { subject: s, .. } if *s == subject),
        "{error}"
    );
    assert!(error.to_string().contains("incompatible"), "{error}");
}

#[tokio::test]
async fn an_unknown_schema_id_is_poison_with_the_id() {
    let registry = registry().await;
    let decoder = AvroDecoder::new(registry, ORDER_V1).expect("the v1 schema parses");
    let unknown = 2_000_000_000;
    let error = decoder
        .decode::<OrderV1>(&encode_frame(unknown, b"\x06o-1\x02"))
        .await
        .expect_err("no registry holds two billion schemas");
    assert!(
        matches!(error, Error::UnknownSchema { schema_id, .. } if schema_id == unknown),
        "{error}"
    );
    assert!(error.is_poison() && !error.is_transient(), "{error}");
    assert_eq!(error.schema_id(), Some(unknown));
}

#[tokio::test]
async fn a_bad_magic_byte_a_truncated_header_and_a_truncated_record_are_poison() {
    let registry = registry().await;
    let subject = unique("orders-value");
    let encoder = AvroEncoder::new(registry.clone(), &subject, ORDER_V1)
        .expect("the v1 schema parses")
        .with_auto_register(true);
    let bytes = encoder.encode(&order()).await.expect("v1 registers");
    let decoder = AvroDecoder::new(registry, ORDER_V1).expect("the v1 schema parses");

    let error = decoder
        .decode::<OrderV1>(br#"{"id":"o-1"}"#)
        .await
        .expect_err("JSON is not framed");
    assert!(
        matches!(error, Error::Wire(WireError::BadMagic { found: b'{' })),
        "{error}"
    );
    assert!(error.is_poison(), "{error}");

    let error = decoder
        .decode::<OrderV1>(&bytes[..3])
        .await
        .expect_err("three bytes are no header");
    assert!(
        matches!(error, Error::Wire(WireError::TruncatedHeader { len: 3 })),
        "{error}"
    );
    assert!(error.is_poison(), "{error}");

    let error = decoder
        .decode::<OrderV1>(&bytes[..bytes.len() - 1])
        .await
        .expect_err("the record's last byte is missing");
    assert!(matches!(error, Error::Undecodable { .. }), "{error}");
    assert!(error.is_poison() && error.schema_id().is_some(), "{error}");

    let mut longer = bytes.clone();
    longer.push(0);
    let error = decoder
        .decode::<OrderV1>(&longer)
        .await
        .expect_err("a byte follows the record");
    assert!(
        error.to_string().contains("left after the record"),
        "{error}"
    );
}

#[tokio::test]
async fn a_record_that_does_not_resolve_into_the_readers_schema_is_poison() {
    let registry = registry().await;
    let subject = unique("orders-value");
    let bytes = AvroEncoder::new(registry.clone(), &subject, ORDER_V1)
        .expect("the v1 schema parses")
        .with_auto_register(true)
        .encode(&order())
        .await
        .expect("v1 registers");
    let other = r#"{"type": "record", "name": "OrderPlaced", "namespace": "shop",
      "fields": [{"name": "id", "type": "long"}]}"#;
    let decoder = AvroDecoder::new(registry, other).expect("the other schema parses");
    let error = decoder
        .decode_value(&bytes)
        .await
        .expect_err("a string id does not resolve into a long");
    assert!(matches!(error, Error::Undecodable { .. }), "{error}");
    assert!(error.is_poison(), "{error}");
}

#[tokio::test]
async fn the_record_name_strategies_register_under_the_full_name() {
    let registry = registry().await;
    let topic = unique("orders");
    let encoder = AvroEncoder::for_topic(
        registry.clone(),
        SubjectNameStrategy::TopicRecordName,
        &topic,
        MessagePart::Value,
        ORDER_V1,
    )
    .expect("the v1 schema parses")
    .with_auto_register(true);
    assert_eq!(encoder.subject(), format!("{topic}-shop.OrderPlaced"));
    let bytes = encoder
        .encode(&order())
        .await
        .expect("v1 registers under the topic-record subject");
    let decoded: OrderV1 = AvroDecoder::new(registry, ORDER_V1)
        .expect("the v1 schema parses")
        .decode(&bytes)
        .await
        .expect("the payload decodes");
    assert_eq!(decoded, order());
}

#[tokio::test]
async fn a_registry_where_nothing_listens_is_transient_not_poison() {
    // A port just freed: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("the OS lends a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}/apis/ccompat/v7");
    let registry = RegistryClient::new(RegistryConfig::new(&url)).expect("an http:// URL");
    let decoder = AvroDecoder::new(registry, ORDER_V1).expect("the v1 schema parses");
    let error = decoder
        .decode::<OrderV1>(&encode_frame(1, b"\x06o-1\x02"))
        .await
        .expect_err("nothing answers");
    assert!(error.is_transient() && !error.is_poison(), "{error}");
    assert!(
        error.to_string().contains(&url),
        "the error names the registry: {error}"
    );
}

/// Protobuf: a `prost` message under a `.proto` schema.
mod protobuf {
    use super::{registry, unique};
    use consumer_codec::Error;
    use consumer_codec::protobuf::{ProtobufDecoder, ProtobufEncoder};
    use consumer_codec::wire::decode_protobuf_frame;

    const PROTO: &str = "syntax = \"proto3\";\npackage shop;\n\n\
        message OrderPlaced {\n  string id = 1;\n  int64 amount = 2;\n}\n\n\
        message OrderCancelled {\n  string id = 1;\n  string reason = 2;\n}\n";

    #[derive(Clone, PartialEq, prost::Message)]
    struct OrderPlaced {
        #[prost(string, tag = "1")]
        id: String,
        #[prost(int64, tag = "2")]
        amount: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct OrderCancelled {
        #[prost(string, tag = "1")]
        id: String,
        #[prost(string, tag = "2")]
        reason: String,
    }

    #[tokio::test]
    async fn a_message_round_trips_with_its_message_indexes() {
        let registry = registry().await;
        let subject = unique("orders-value");
        let placed = OrderPlaced {
            id: "o-1".to_owned(),
            amount: 4200,
        };
        let encoder =
            ProtobufEncoder::new(registry.clone(), &subject, PROTO).with_auto_register(true);
        let bytes = encoder
            .encode(&placed)
            .await
            .expect("the registry registers the .proto");
        assert_eq!(
            bytes[5], 0,
            "the first message type is written as a single 0"
        );

        let decoder = ProtobufDecoder::new(registry.clone());
        let decoded = decoder
            .decode::<OrderPlaced>(&bytes)
            .await
            .expect("the payload decodes");
        assert_eq!(decoded.message, placed);
        assert_eq!(decoded.message_indexes, [0]);
        assert_eq!(Some(decoded.schema_id), encoder.schema_id().await.ok());

        let cancelled = OrderCancelled {
            id: "o-1".to_owned(),
            reason: "late".to_owned(),
        };
        let bytes = ProtobufEncoder::new(registry, &subject, PROTO)
            .with_message_indexes(vec![1])
            .encode(&cancelled)
            .await
            .expect("the schema is registered: found by lookup");
        assert_eq!(
            decode_protobuf_frame(&bytes)
                .expect("framed")
                .message_indexes,
            [1]
        );
        let decoded = decoder
            .decode::<OrderCancelled>(&bytes)
            .await
            .expect("the second type decodes");
        assert_eq!(decoded.message, cancelled);
    }

    #[tokio::test]
    async fn an_avro_schema_id_or_bytes_that_are_not_the_type_are_poison() {
        let registry = registry().await;
        let avro = consumer_codec::avro::AvroEncoder::new(
            registry.clone(),
            unique("avro-value"),
            super::ORDER_V1,
        )
        .expect("the v1 schema parses")
        .with_auto_register(true)
        .encode(&super::order())
        .await
        .expect("v1 registers");
        let mut framed = avro[..5].to_vec();
        framed.push(0);
        framed.extend_from_slice(&avro[5..]);
        let decoder = ProtobufDecoder::new(registry.clone());
        let error = decoder
            .decode::<OrderPlaced>(&framed)
            .await
            .expect_err("an Avro schema id");
        assert!(matches!(error, Error::UnusableSchema { .. }), "{error}");
        assert!(error.is_poison(), "{error}");

        let encoder =
            ProtobufEncoder::new(registry, unique("orders-value"), PROTO).with_auto_register(true);
        let mut bytes = encoder
            .encode(&OrderPlaced {
                id: "o-1".to_owned(),
                amount: 1,
            })
            .await
            .expect("the registry registers the .proto");
        bytes.truncate(bytes.len() - 1);
        let error = decoder
            .decode::<OrderPlaced>(&bytes)
            .await
            .expect_err("the message is cut short");
        assert!(matches!(error, Error::Undecodable { .. }), "{error}");
        assert!(error.is_poison() && error.schema_id().is_some(), "{error}");
    }
}

#[tokio::test]
async fn a_registry_that_takes_the_connection_and_never_answers_times_out_as_transient() {
    // The kernel completes the handshake on the listener's backlog; nobody
    // ever reads the request.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("the OS lends a free port");
    let port = listener
        .local_addr()
        .expect("a bound listener has an address")
        .port();
    let config = RegistryConfig::new(format!("http://127.0.0.1:{port}"))
        .with_timeout(std::time::Duration::from_millis(300));
    let registry = RegistryClient::new(config).expect("an http:// URL");
    let error = registry.schema_by_id(1).await.expect_err("nothing answers");
    assert!(error.is_transient() && !error.is_poison(), "{error}");
    assert!(error.to_string().contains("timeout"), "{error}");
    drop(listener);
}
