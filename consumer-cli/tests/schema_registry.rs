//! `consumer schema registry-check`, the real binary against a real
//! registry (Apicurio Registry's Confluent-compatible API, `REGISTRY_URL`,
//! from `scripts/services registry`): a subject's first version, a
//! compatible next one (exit 0) and an incompatible one (exit 8, the
//! registry's reason printed), and a registry that does not answer (exit 3).

use std::path::PathBuf;
use std::process::Output;

use consumer_codec::registry::{Compatibility, RegistryClient, RegistryConfig, Schema};

const V1: &str = r#"{"type": "record", "name": "OrderPlaced", "namespace": "com.example.orders",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"}]}"#;
/// A field with a default: BACKWARD compatible.
const V2: &str = r#"{"type": "record", "name": "OrderPlaced", "namespace": "com.example.orders",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"},
             {"name": "currency", "type": "string", "default": "EUR"}]}"#;
/// `amount` becomes a string: the records written before cannot be read.
const V3: &str = r#"{"type": "record", "name": "OrderPlaced", "namespace": "com.example.orders",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "string"}]}"#;

fn registry_url() -> String {
    let url = std::env::var("REGISTRY_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".to_owned());
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default();
    let up = std::net::ToSocketAddrs::to_socket_addrs(authority)
        .map(|mut a| {
            a.any(|a| {
                std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)).is_ok()
            })
        })
        .unwrap_or(false);
    assert!(
        up,
        "no schema registry answers at {url}: run `scripts/services registry` (it starts Apicurio Registry there) or set REGISTRY_URL"
    );
    url
}

/// A schema file in a scratch directory.
fn schema_file(text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("registry-check-{}.avsc", uuid::Uuid::new_v4()));
    std::fs::write(&path, text).expect("schema file");
    path
}

async fn check(url: &str, subject: &str, schema: &str, extra: &[&str]) -> Output {
    let file = schema_file(schema);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_consumer"))
        .args([
            "schema",
            "registry-check",
            "--registry",
            url,
            "--subject",
            subject,
        ])
        .arg("--schema-file")
        .arg(&file)
        .args(extra)
        .output()
        .await
        .expect("the consumer binary runs");
    let _ = std::fs::remove_file(file);
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn a_compatible_version_exits_0_and_an_incompatible_one_8_with_the_registrys_reason() {
    let url = registry_url();
    let subject = format!("ct-check-{}-value", uuid::Uuid::new_v4().simple());

    let first = check(&url, &subject, V1, &[]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert!(text(&first).contains("no version yet"), "{}", text(&first));

    let registry = RegistryClient::new(RegistryConfig::new(&url)).expect("client");
    registry
        .register(&subject, &Schema::avro(V1))
        .await
        .expect("v1 registered");
    registry
        .set_compatibility(&subject, Compatibility::Backward)
        .await
        .expect("BACKWARD");

    let next = check(&url, &subject, V2, &[]).await;
    assert_eq!(next.status.code(), Some(0), "{}", text(&next));
    assert!(text(&next).contains("is compatible"), "{}", text(&next));

    let broken = check(&url, &subject, V3, &["--json"]).await;
    assert_eq!(broken.status.code(), Some(8), "{}", text(&broken));
    let report: serde_json::Value =
        serde_json::from_slice(&broken.stdout).expect("one JSON document");
    assert_eq!(report["compatible"], false, "{report}");
    assert!(
        text(&broken).contains("refuses this schema as the next version"),
        "{}",
        text(&broken)
    );
    // Nothing was registered by the checks.
    let latest = registry
        .subject_version(&subject, consumer_codec::registry::Version::Latest)
        .await
        .expect("latest");
    assert_eq!(latest.version, 1);
}

#[tokio::test]
async fn a_registry_that_does_not_answer_exits_3_naming_it() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}/apis/ccompat/v7");
    let out = check(&url, "orders-value", V1, &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("schema registry"), "{}", text(&out));
}
