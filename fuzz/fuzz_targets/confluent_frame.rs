//! Arbitrary bytes through the Confluent wire-format decoders: they never
//! panic, and a frame they accept writes back to the same bytes (so the
//! decoder and the encoder agree on every header they both know).
#![no_main]

use consumer_codec::wire::{
    HEADER_LEN, decode_frame, decode_protobuf_frame, encode_frame, encode_protobuf_frame,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(frame) = decode_frame(bytes) {
        assert_eq!(encode_frame(frame.schema_id, frame.payload), bytes);
    }
    let Ok(frame) = decode_protobuf_frame(bytes) else {
        return;
    };
    let again = encode_protobuf_frame(frame.schema_id, &frame.message_indexes, frame.payload);
    let back = decode_protobuf_frame(&again).expect("a frame just written decodes");
    assert_eq!(back, frame);
    // Byte for byte, except that [0] may have come as the explicit
    // count 1 and index 0, which the serializers shorten to a single 0.
    if bytes.get(HEADER_LEN) == Some(&0) {
        assert_eq!(again, bytes);
    }
});
