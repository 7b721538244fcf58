//! An AMQP header's typed value as the header bytes the runtime reads.
//!
//! Strings and byte arrays are their bytes; numbers, booleans and
//! timestamps their text. Tables, arrays, decimals and void have no text
//! of their own: they are carried as JSON (a table as an object, an array
//! as an array, a decimal as its digits in a string, void as `null`), so a
//! handler that reads such a header finds it, and a dead letter keeps it.
//! A header the framework reads (a CloudEvents attribute under any
//! binding's name, the trace context, `x-consumer-*`, `content-type`) must
//! be text: as a table, array, decimal or void it makes the message poison,
//! with the reason.

use consumer_backend::envelope::HeaderError;
use lapin::types::{AMQPValue, DecimalValue};
use serde_json::{Map, Number, Value};

/// What a header's value becomes.
pub(crate) enum Read {
    /// The header's bytes.
    Bytes(Vec<u8>),
    /// A framework header of a type that is not text.
    Refused(HeaderError),
}

/// `value` of header `name`, as the runtime reads it.
pub(crate) fn read(name: &str, value: &AMQPValue) -> Read {
    if let Some(text) = scalar(value) {
        return Read::Bytes(text);
    }
    if read_by_the_framework(name) {
        return Read::Refused(HeaderError {
            name: name.to_owned(),
            reason: format!(
                "is an AMQP {}, where the framework reads text",
                type_name(value)
            ),
        });
    }
    Read::Bytes(json(value).to_string().into_bytes())
}

/// Whether the runtime reads header `name` (any case).
fn read_by_the_framework(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["ce_", "ce-", "cloudevents:", "cloudevents_", "x-consumer-"]
        .iter()
        .any(|prefix| lower.starts_with(prefix))
        || matches!(
            lower.as_str(),
            "traceparent" | "tracestate" | "content-type"
        )
}

fn type_name(value: &AMQPValue) -> &'static str {
    match value {
        AMQPValue::FieldTable(_) => "table",
        AMQPValue::FieldArray(_) => "array",
        AMQPValue::DecimalValue(_) => "decimal",
        AMQPValue::Void => "void",
        _ => "scalar",
    }
}

/// The bytes of a value that has text of its own.
fn scalar(value: &AMQPValue) -> Option<Vec<u8>> {
    Some(match value {
        AMQPValue::LongString(s) => s.as_bytes().to_vec(),
        AMQPValue::ShortString(s) => s.as_str().as_bytes().to_vec(),
        AMQPValue::ByteArray(b) => b.as_slice().to_vec(),
        AMQPValue::Boolean(b) => b.to_string().into_bytes(),
        AMQPValue::ShortShortInt(n) => n.to_string().into_bytes(),
        AMQPValue::ShortShortUInt(n) => n.to_string().into_bytes(),
        AMQPValue::ShortInt(n) => n.to_string().into_bytes(),
        AMQPValue::ShortUInt(n) => n.to_string().into_bytes(),
        AMQPValue::LongInt(n) => n.to_string().into_bytes(),
        AMQPValue::LongUInt(n) => n.to_string().into_bytes(),
        AMQPValue::LongLongInt(n) => n.to_string().into_bytes(),
        AMQPValue::Timestamp(n) => n.to_string().into_bytes(),
        AMQPValue::Float(n) => n.to_string().into_bytes(),
        AMQPValue::Double(n) => n.to_string().into_bytes(),
        AMQPValue::DecimalValue(_)
        | AMQPValue::FieldArray(_)
        | AMQPValue::FieldTable(_)
        | AMQPValue::Void => return None,
    })
}

/// `value` as JSON (text lossily as UTF-8).
fn json(value: &AMQPValue) -> Value {
    match value {
        AMQPValue::LongString(s) => Value::String(String::from_utf8_lossy(s.as_bytes()).into()),
        AMQPValue::ShortString(s) => Value::String(s.as_str().to_owned()),
        AMQPValue::ByteArray(b) => Value::String(String::from_utf8_lossy(b.as_slice()).into()),
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(n) => Value::from(*n),
        AMQPValue::ShortShortUInt(n) => Value::from(*n),
        AMQPValue::ShortInt(n) => Value::from(*n),
        AMQPValue::ShortUInt(n) => Value::from(*n),
        AMQPValue::LongInt(n) => Value::from(*n),
        AMQPValue::LongUInt(n) => Value::from(*n),
        AMQPValue::LongLongInt(n) => Value::from(*n),
        AMQPValue::Timestamp(n) => Value::from(*n),
        AMQPValue::Float(n) => Number::from_f64(f64::from(*n)).map_or(Value::Null, Value::Number),
        AMQPValue::Double(n) => Number::from_f64(*n).map_or(Value::Null, Value::Number),
        AMQPValue::DecimalValue(d) => Value::String(decimal(*d)),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(json).collect()),
        AMQPValue::FieldTable(t) => Value::Object(
            t.inner()
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), json(v)))
                .collect::<Map<_, _>>(),
        ),
        AMQPValue::Void => Value::Null,
    }
}

/// A decimal's digits: `value` / 10^`scale`.
fn decimal(d: DecimalValue) -> String {
    let digits = d.value.to_string();
    let scale = usize::from(d.scale);
    if scale == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    format!("{whole}.{fraction}")
}

#[cfg(test)]
mod tests {
    use lapin::types::{FieldArray, FieldTable, LongString};

    use super::*;

    fn text(read: Read) -> String {
        match read {
            Read::Bytes(b) => String::from_utf8(b).expect("text"),
            Read::Refused(e) => panic!("refused: {e}"),
        }
    }

    #[test]
    fn tables_arrays_decimals_and_void_are_carried_as_json() {
        let mut t = FieldTable::default();
        t.insert(
            "region".into(),
            AMQPValue::LongString(LongString::from("eu")),
        );
        t.insert("tries".into(), AMQPValue::LongInt(2));
        assert_eq!(
            text(read("x-meta", &AMQPValue::FieldTable(t))),
            r#"{"region":"eu","tries":2}"#
        );
        let a = FieldArray::from(vec![AMQPValue::Boolean(true), AMQPValue::Void]);
        assert_eq!(
            text(read("x-list", &AMQPValue::FieldArray(a))),
            "[true,null]"
        );
        let d = DecimalValue { scale: 2, value: 5 };
        assert_eq!(
            text(read("x-price", &AMQPValue::DecimalValue(d))),
            r#""0.05""#
        );
        assert_eq!(text(read("x-flag", &AMQPValue::Void)), "null");
        assert_eq!(text(read("x-n", &AMQPValue::LongInt(3))), "3");
    }

    #[test]
    fn a_framework_header_that_is_not_text_is_refused_with_the_reason() {
        for name in [
            "ce_id",
            "CE-Type",
            "cloudEvents:partitionkey",
            "traceparent",
            "x-consumer-attempt",
        ] {
            match read(name, &AMQPValue::FieldTable(FieldTable::default())) {
                Read::Refused(e) => {
                    assert_eq!(e.name, name);
                    assert!(e.reason.contains("table"), "{}", e.reason);
                }
                Read::Bytes(b) => panic!("{name} read as {b:?}"),
            }
        }
        assert!(matches!(
            read("ce_id", &AMQPValue::LongLongInt(7)),
            Read::Bytes(_)
        ));
    }
}
