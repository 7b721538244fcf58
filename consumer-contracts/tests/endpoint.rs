//! The AsyncAPI document served by a service's health endpoint, and a
//! service whose document cannot be made refused before it starts.

use std::net::SocketAddr;

use consumer_contracts::ServiceContracts;
use consumer_core::describe::PayloadType;
use consumer_core::handler::{Invocation, Outcome};
use consumer_core::{Handler, MemoryBroker, MemoryStore, RetryPolicy, Service};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    out
}

#[tokio::test]
async fn the_asyncapi_document_is_served_and_one_that_cannot_be_made_stops_the_start() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Ping {
        n: u32,
    }
    /// Says its message type only when `.0`.
    struct Takes(bool);
    impl Handler<MemoryStore> for Takes {
        fn name(&self) -> &'static str {
            "takes"
        }
        fn retry_policy(&self) -> RetryPolicy {
            RetryPolicy::none()
        }
        fn event_types(&self) -> &'static [&'static str] {
            &["Ping"]
        }
        fn payload_type(&self) -> Option<PayloadType> {
            self.0.then(PayloadType::of::<Ping>)
        }
        async fn handle(&self, _: &mut Invocation<'_, MemoryStore>) -> Outcome {
            Outcome::Processed
        }
    }
    let broker = MemoryBroker::new(1);
    let consumer = |says| {
        consumer_core::Consumer::new(broker.source("pings"), MemoryStore::new(), Takes(says))
    };

    let err = Service::new("s")
        .consumer("pings", consumer(false))
        .with_asyncapi_endpoint()
        .expect_err("no message type");
    assert!(
        err.to_string()
            .contains("handler `takes` does not say its message type"),
        "{err}"
    );

    let service = Service::new("s")
        .consumer("pings", consumer(true))
        .with_health_endpoint("127.0.0.1:0".parse().expect("addr"))
        .expect("bind")
        .with_asyncapi_endpoint()
        .expect("a document");
    let addr = service.health_endpoint().expect("listening");
    let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(service.run_until(async move {
        let _ = stop.await;
    }));
    let answer = get(addr, "/asyncapi.json").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("content-type: application/json"),
        "{answer}"
    );
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let document: serde_json::Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(document["asyncapi"], "3.1.0");
    assert_eq!(
        document["operations"]["pings.takes.Ping"]["action"],
        "receive"
    );
    let _ = stop_tx.send(());
    run.await.expect("join").expect("no part failed");
}
