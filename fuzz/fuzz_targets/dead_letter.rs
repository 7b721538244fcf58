//! A message read back from a dead-letter queue, with arbitrary headers
//! and payload: parsing never panics, and a letter that parses turns into
//! a message that parses back to the same letter.
#![no_main]

use consumer_backend::dead_letter::DeadLetter;
use consumer_backend::envelope::{Headers, Message};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    key: Option<String>,
    headers: Vec<(String, &'a [u8])>,
    payload: &'a [u8],
}

fuzz_target!(|input: Input<'_>| {
    let headers: Headers = input
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), *v))
        .collect();
    let message = Message {
        key: input.key,
        headers,
        payload: bytes::Bytes::copy_from_slice(input.payload),
    };
    let Some(letter) = DeadLetter::from_message(&message) else {
        return;
    };
    let again = DeadLetter::from_message(&letter.to_message()).expect("a letter we write parses");
    assert_eq!(again.kind, letter.kind);
    assert_eq!(again.attempts, letter.attempts);
    assert_eq!(again.message_id, letter.message_id);
    assert_eq!(again.handler, letter.handler);
    assert_eq!(again.key, letter.key);
    assert_eq!(again.origin, letter.origin);
    assert_eq!(again.payload_omitted, letter.payload_omitted);
    assert_eq!(again.payload, letter.payload);
    // Written once more, it is stable.
    let third = DeadLetter::from_message(&again.to_message()).expect("parses");
    assert_eq!(third.error, again.error);
    assert_eq!(third.causes, again.causes);
    assert_eq!(third.original_headers, again.original_headers);
});
