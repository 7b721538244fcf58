//! What decoding a schema-registry payload costs through the framework's
//! codecs (`consumer::codec::Avro`, `Protobuf`: what
//! `#[handler(codec = ..)]` calls), against a raw loop doing the same work
//! with `apache-avro` / `prost` directly, on the same records, with every
//! schema already fetched (the steady state: a codec asks the registry once
//! per schema id).
//!
//! Sides:
//!
//! * `framework-avro`: `Decode::<Order>::decode` of the `Avro` codec on
//!   records written with the reader's own schema: frame, writer's schema
//!   from the codec's cache, then read straight into the type.
//! * `raw-avro`: the same records through apache-avro's
//!   `SpecificDatumReader<Order>` made once: the limit of a hand-written
//!   loop.
//! * `framework-avro-evolved`: records written with a second version of the
//!   schema (one more field), read as the first: Avro's resolution, then
//!   serde.
//! * `raw-avro-evolved`: the same records through a `GenericDatumReader`
//!   built once for the (writer, reader) pair, then
//!   `apache_avro::from_value`.
//! * `framework-protobuf` / `raw-protobuf`: the `Protobuf` codec against
//!   `prost::Message::decode` of the bytes after the header.
//!
//! ```sh
//! scripts/services registry
//! cargo bench --bench registry_codecs --features registry        # wall clock and CPU, all sides
//! BENCH=registry_codecs scripts/bench-callgrind                   # instructions per record
//! registry_codecs --only raw-avro --n 20000 [--setup-only]        # one side (callgrind)
//! ```
//!
//! Needs a registry (`REGISTRY_URL`, default
//! `http://127.0.0.1:8081/apis/ccompat/v7`); each run registers its schemas
//! under subjects of its own.

use std::time::{Duration, Instant};

use apache_avro::AvroSchema;
use apache_avro::reader::datum::{GenericDatumReader, SpecificDatumReader};
use consumer::codec::avro::AvroEncoder;
use consumer::codec::protobuf::ProtobufEncoder;
use consumer::codec::registry::{RegistryClient, RegistryConfig};
use consumer::codec::{Avro, Decode, Protobuf};

#[derive(Debug, serde::Serialize, serde::Deserialize, AvroSchema)]
#[avro(namespace = "com.example.orders")]
struct Order {
    id: String,
    customer: String,
    amount: i64,
    currency: String,
    lines: i32,
}

/// The second version: a field the first's readers do not know.
#[derive(Debug, serde::Serialize, AvroSchema)]
#[serde(rename = "Order")]
#[avro(namespace = "com.example.orders")]
struct OrderV2 {
    id: String,
    customer: String,
    amount: i64,
    currency: String,
    lines: i32,
    channel: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OrderProto {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(string, tag = "2")]
    customer: String,
    #[prost(int64, tag = "3")]
    amount: i64,
    #[prost(string, tag = "4")]
    currency: String,
    #[prost(int32, tag = "5")]
    lines: i32,
}

const PROTO: &str = r#"syntax = "proto3";
package orders;
message OrderProto {
  string id = 1;
  string customer = 2;
  int64 amount = 3;
  string currency = 4;
  int32 lines = 5;
}
"#;

const SIDES: [&str; 6] = [
    "framework-avro",
    "raw-avro",
    "framework-avro-evolved",
    "raw-avro-evolved",
    "framework-protobuf",
    "raw-protobuf",
];
const FORMATS: [&str; 3] = ["avro", "avro-evolved", "protobuf"];

struct Options {
    only: Option<String>,
    n: usize,
    rounds: usize,
    setup_only: bool,
}

fn options() -> Options {
    let mut o = Options {
        only: None,
        n: 20_000,
        rounds: 3,
        setup_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--only" => o.only = args.next(),
            "--n" => o.n = args.next().and_then(|v| v.parse().ok()).unwrap_or(o.n),
            "--rounds" => o.rounds = args.next().and_then(|v| v.parse().ok()).unwrap_or(1),
            "--setup-only" => o.setup_only = true,
            // Given to every bench by `cargo bench`, and by bench-callgrind.
            "--bench" => {}
            "--spans" => {
                args.next();
            }
            _ => {}
        }
    }
    o
}

fn order(n: usize) -> Order {
    Order {
        id: format!("order-{n}"),
        customer: format!("customer-{}", n % 97),
        amount: i64::try_from(n).unwrap_or(i64::MAX) * 7,
        currency: "EUR".to_owned(),
        lines: i32::try_from(n % 13).unwrap_or(0),
    }
}

/// The same records, framed, for both sides of a format.
async fn records(registry: &RegistryClient, format: &str, n: usize) -> Vec<Vec<u8>> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut out = Vec::with_capacity(n);
    if format == "avro" {
        let schema = serde_json::to_string(&Order::get_schema()).expect("schema");
        let encoder = AvroEncoder::new(registry.clone(), format!("bench-{run}-value"), &schema)
            .expect("encoder")
            .with_auto_register(true);
        for i in 0..n {
            out.push(encoder.encode(&order(i)).await.expect("encoded"));
        }
    } else if format == "avro-evolved" {
        let schema = serde_json::to_string(&OrderV2::get_schema()).expect("schema");
        let encoder = AvroEncoder::new(registry.clone(), format!("bench-{run}-value"), &schema)
            .expect("encoder")
            .with_auto_register(true);
        for i in 0..n {
            let o = order(i);
            let v2 = OrderV2 {
                id: o.id,
                customer: o.customer,
                amount: o.amount,
                currency: o.currency,
                lines: o.lines,
                channel: "web".to_owned(),
            };
            out.push(encoder.encode(&v2).await.expect("encoded"));
        }
    } else {
        let encoder = ProtobufEncoder::new(registry.clone(), format!("bench-{run}-value"), PROTO)
            .with_auto_register(true);
        for i in 0..n {
            let o = order(i);
            let message = OrderProto {
                id: o.id,
                customer: o.customer,
                amount: o.amount,
                currency: o.currency,
                lines: o.lines,
            };
            out.push(encoder.encode(&message).await.expect("encoded"));
        }
    }
    out
}

/// One side's pass over `records`; the sum of the amounts read, so
/// nothing is optimised away.
async fn run_side(
    side: &str,
    registry: &RegistryClient,
    records: &[Vec<u8>],
    setup_only: bool,
) -> i64 {
    match side {
        "framework-avro" | "framework-avro-evolved" => {
            let codec = Avro::new(registry.clone());
            // The writer's schema fetched and the reader's made: steady state.
            let _: Order = codec.decode(&records[0]).await.expect("warm");
            if setup_only {
                return 0;
            }
            let mut sum = 0;
            for r in records {
                let o: Order = codec.decode(r).await.expect("decoded");
                sum += o.amount;
            }
            sum
        }
        "raw-avro" => {
            let reader = SpecificDatumReader::<Order>::builder()
                .build()
                .expect("reader");
            if setup_only {
                return 0;
            }
            let mut sum = 0;
            for r in records {
                assert_eq!(r[0], 0, "magic byte");
                let mut body = &r[5..];
                let o = reader.read(&mut body).expect("decoded");
                sum += o.amount;
            }
            sum
        }
        "raw-avro-evolved" => {
            let id =
                u32::from_be_bytes([records[0][1], records[0][2], records[0][3], records[0][4]]);
            let text = registry.schema_by_id(id).await.expect("writer's schema");
            let writer = apache_avro::Schema::parse_str(&text.schema).expect("parses");
            let reader_schema = Order::get_schema();
            let reader = GenericDatumReader::builder(&writer)
                .reader_schema(&reader_schema)
                .build()
                .expect("reader");
            if setup_only {
                return 0;
            }
            let mut sum = 0;
            for r in records {
                assert_eq!(r[0], 0, "magic byte");
                let mut body = &r[5..];
                let value = reader.read_value(&mut body).expect("decoded");
                let o: Order = apache_avro::from_value(&value).expect("an order");
                sum += o.amount;
            }
            sum
        }
        "framework-protobuf" => {
            let codec = Protobuf::new(registry.clone());
            let _: OrderProto = codec.decode(&records[0]).await.expect("warm");
            if setup_only {
                return 0;
            }
            let mut sum = 0;
            for r in records {
                let o: OrderProto = codec.decode(r).await.expect("decoded");
                sum += o.amount;
            }
            sum
        }
        "raw-protobuf" => {
            if setup_only {
                return 0;
            }
            let mut sum = 0;
            for r in records {
                assert_eq!(r[0], 0, "magic byte");
                // Header, then the message indexes `[0]` as one byte.
                let o = <OrderProto as prost::Message>::decode(&r[6..]).expect("decoded");
                sum += o.amount;
            }
            sum
        }
        other => panic!("unknown side {other}: one of {SIDES:?}"),
    }
}

fn cpu_now() -> Duration {
    cpu_time::ProcessTime::now().as_duration()
}

fn main() {
    let o = options();
    let url = std::env::var("REGISTRY_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".to_owned());
    let registry = RegistryClient::new(RegistryConfig::new(&url)).expect("registry client");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let sides: Vec<&str> = match &o.only {
        Some(side) => vec![side.as_str()],
        None => SIDES.to_vec(),
    };
    println!(
        "registry codecs: {} records a round, {} round(s), registry at {url}",
        o.n, o.rounds
    );
    let mut per_record = std::collections::BTreeMap::new();
    for format in FORMATS {
        let mine: Vec<&str> = sides
            .iter()
            .copied()
            .filter(|s| s.split_once('-').map(|(_, f)| f) == Some(format))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let records = runtime.block_on(records(&registry, format, o.n));
        for side in mine {
            if o.setup_only {
                runtime.block_on(run_side(side, &registry, &records, true));
                continue;
            }
            let mut best = (Duration::MAX, Duration::MAX);
            for _ in 0..o.rounds {
                let (wall, cpu) = (Instant::now(), cpu_now());
                let sum = runtime.block_on(run_side(side, &registry, &records, false));
                std::hint::black_box(sum);
                best = (
                    best.0.min(wall.elapsed()),
                    best.1.min(cpu_now().saturating_sub(cpu)),
                );
            }
            let n = u32::try_from(o.n).unwrap_or(u32::MAX);
            per_record.insert(side, (best.0 / n, best.1 / n));
            println!(
                "{side:<20} {:>9.0} ns/record wall {:>9.0} ns/record CPU (best of {})",
                (best.0 / n).as_nanos(),
                (best.1 / n).as_nanos(),
                o.rounds
            );
        }
    }
    for format in FORMATS {
        let (Some(f), Some(r)) = (
            per_record.get(format!("framework-{format}").as_str()),
            per_record.get(format!("raw-{format}").as_str()),
        ) else {
            continue;
        };
        println!(
            "{format}: framework / raw = {:.2}x CPU per record",
            f.1.as_secs_f64() / r.1.as_secs_f64().max(f64::MIN_POSITIVE)
        );
    }
}
