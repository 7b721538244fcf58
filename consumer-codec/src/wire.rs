//! The Confluent wire format: what the standard serializers put in front of
//! a payload, parsed and written as pure functions.
//!
//! ```text
//! byte 0      magic byte, always 0
//! bytes 1-4   the schema id, a big-endian 32-bit integer
//! (Protobuf)  the message indexes: a zigzag varint count, then that many
//!             zigzag varints; the single byte 0 stands for [0]
//! the rest    the payload (Avro binary, Protobuf, JSON)
//! ```
//!
//! Every error here is the payload's fault: [`WireError`] says which byte is
//! wrong and why, and a consumer treats it as poison.

use crate::error::WireError;

/// The byte every Confluent-framed payload starts with.
pub const MAGIC_BYTE: u8 = 0;

/// The length of the magic byte and the schema id.
pub const HEADER_LEN: usize = 5;

/// The longest zigzag varint of a 32-bit integer, in bytes.
const MAX_VARINT_LEN: usize = 5;

/// A framed payload split into its schema id and the bytes after the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The registry's id of the schema the payload was written with.
    pub schema_id: u32,
    /// The bytes after the magic byte and the schema id.
    pub payload: &'a [u8],
}

/// A Protobuf payload's frame: the schema id, the path of the message type
/// in the schema, and the encoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtobufFrame<'a> {
    /// The registry's id of the schema the payload was written with.
    pub schema_id: u32,
    /// The message type's path in the schema file: `[0]` is its first
    /// top-level message, `[1, 0]` the first nested message of the second.
    pub message_indexes: Vec<u32>,
    /// The encoded Protobuf message.
    pub payload: &'a [u8],
}

/// Splits a framed payload into its schema id and the rest.
///
/// # Errors
///
/// [`WireError::Empty`], [`WireError::BadMagic`] or
/// [`WireError::TruncatedHeader`] when the bytes are not a frame.
///
/// ```
/// use consumer_codec::wire::{decode_frame, encode_frame};
///
/// let framed = encode_frame(42, b"avro bytes");
/// let frame = decode_frame(&framed)?;
/// assert_eq!((frame.schema_id, frame.payload), (42, &b"avro bytes"[..]));
/// # Ok::<(), consumer_codec::WireError>(())
/// ```
pub fn decode_frame(bytes: &[u8]) -> Result<Frame<'_>, WireError> {
    let Some(&magic) = bytes.first() else {
        return Err(WireError::Empty);
    };
    if magic != MAGIC_BYTE {
        return Err(WireError::BadMagic { found: magic });
    }
    let Some((header, payload)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(WireError::TruncatedHeader { len: bytes.len() });
    };
    let schema_id = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    Ok(Frame { schema_id, payload })
}

/// Splits a framed Protobuf payload into its schema id, message indexes and
/// message.
///
/// # Errors
///
/// What [`decode_frame`] returns, and [`WireError::TruncatedVarint`],
/// [`WireError::VarintTooLong`], [`WireError::BadIndexCount`] or
/// [`WireError::NegativeMessageIndex`] when the indexes are malformed.
pub fn decode_protobuf_frame(bytes: &[u8]) -> Result<ProtobufFrame<'_>, WireError> {
    let mut message_indexes = Vec::new();
    let (schema_id, payload) = read_protobuf_frame(bytes, |index| message_indexes.push(index))?;
    Ok(ProtobufFrame {
        schema_id,
        message_indexes,
        payload,
    })
}

/// [`decode_protobuf_frame`] without the message indexes (checked, not
/// kept): the schema id and the message's bytes, with no allocation.
///
/// # Errors
///
/// As [`decode_protobuf_frame`].
pub fn protobuf_payload(bytes: &[u8]) -> Result<(u32, &[u8]), WireError> {
    read_protobuf_frame(bytes, |_| {})
}

/// Reads the header and the message indexes, handing each index to
/// `index` (the common `[0]`, written as a single 0, as one 0).
fn read_protobuf_frame(
    bytes: &[u8],
    mut index: impl FnMut(u32),
) -> Result<(u32, &[u8]), WireError> {
    let frame = decode_frame(bytes)?;
    let mut offset = HEADER_LEN;
    let count = read_zigzag(bytes, &mut offset)?;
    // The serializers write the common [0] as a single 0.
    if count == 0 {
        index(0);
        return Ok((frame.schema_id, &bytes[offset..]));
    }
    let remaining = bytes.len() - offset;
    // Each index takes at least one byte: a larger count cannot be right.
    let count = usize::try_from(count)
        .ok()
        .filter(|&count| count <= remaining)
        .ok_or(WireError::BadIndexCount { count, remaining })?;
    for position in 0..count {
        let read = read_zigzag(bytes, &mut offset)?;
        let read = u32::try_from(read).map_err(|_| WireError::NegativeMessageIndex {
            position,
            index: read,
        })?;
        index(read);
    }
    Ok((frame.schema_id, &bytes[offset..]))
}

/// Appends the magic byte and the schema id to `out`.
pub fn write_header(schema_id: u32, out: &mut Vec<u8>) {
    out.push(MAGIC_BYTE);
    out.extend_from_slice(&schema_id.to_be_bytes());
}

/// Frames a payload: the magic byte, the schema id, then the payload.
pub fn encode_frame(schema_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    write_header(schema_id, &mut out);
    out.extend_from_slice(payload);
    out
}

/// Appends a Protobuf message's indexes as the serializers write them: `[0]`
/// (and no indexes at all) as the single byte 0, else the count and each
/// index as zigzag varints.
pub fn write_message_indexes(indexes: &[u32], out: &mut Vec<u8>) {
    if indexes.is_empty() || indexes == [0] {
        out.push(0);
        return;
    }
    // A schema with more than i32::MAX message types cannot exist; the
    // saturation only keeps the arithmetic total.
    write_zigzag(i32::try_from(indexes.len()).unwrap_or(i32::MAX), out);
    for &index in indexes {
        write_zigzag(i32::try_from(index).unwrap_or(i32::MAX), out);
    }
}

/// Frames a Protobuf message: header, message indexes, then the message.
pub fn encode_protobuf_frame(schema_id: u32, message_indexes: &[u32], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 1 + payload.len());
    write_header(schema_id, &mut out);
    write_message_indexes(message_indexes, &mut out);
    out.extend_from_slice(payload);
    out
}

/// Reads a zigzag varint of at most 32 bits at `*offset`, and moves the
/// offset past it.
fn read_zigzag(bytes: &[u8], offset: &mut usize) -> Result<i32, WireError> {
    let start = *offset;
    let mut raw: u32 = 0;
    for i in 0..MAX_VARINT_LEN {
        let Some(&byte) = bytes.get(start + i) else {
            return Err(WireError::TruncatedVarint { offset: start });
        };
        // The fifth byte may carry only the top 4 bits of 32.
        if i == MAX_VARINT_LEN - 1 && byte & 0xf0 != 0 {
            return Err(WireError::VarintTooLong { offset: start });
        }
        raw |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *offset = start + i + 1;
            return Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32));
        }
    }
    Err(WireError::VarintTooLong { offset: start })
}

fn write_zigzag(value: i32, out: &mut Vec<u8>) {
    let mut raw = ((value << 1) ^ (value >> 31)) as u32;
    while raw >= 0x80 {
        out.push((raw as u8 & 0x7f) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_its_schema_id_and_payload() {
        let framed = encode_frame(0x0102_0304, b"xyz");
        assert_eq!(framed, [0, 1, 2, 3, 4, b'x', b'y', b'z']);
        let frame = decode_frame(&framed).expect("a frame just written decodes");
        assert_eq!(
            frame,
            Frame {
                schema_id: 0x0102_0304,
                payload: b"xyz"
            }
        );
    }

    #[test]
    fn a_header_alone_is_a_frame_with_an_empty_payload() {
        let frame = decode_frame(&[0, 0, 0, 0, 7]).expect("five bytes are a whole header");
        assert_eq!((frame.schema_id, frame.payload.len()), (7, 0));
    }

    #[test]
    fn an_empty_payload_is_refused_as_empty() {
        assert_eq!(decode_frame(&[]), Err(WireError::Empty));
    }

    #[test]
    fn a_first_byte_other_than_zero_is_a_bad_magic_byte() {
        assert_eq!(
            decode_frame(b"{\"id\":1}"),
            Err(WireError::BadMagic { found: b'{' })
        );
        let message = WireError::BadMagic { found: 1 }.to_string();
        assert!(message.contains("0x01"), "{message}");
    }

    #[test]
    fn fewer_than_five_bytes_are_a_truncated_header() {
        for len in 1..HEADER_LEN {
            let bytes = vec![0; len];
            assert_eq!(
                decode_frame(&bytes),
                Err(WireError::TruncatedHeader { len })
            );
        }
    }

    #[test]
    fn zigzag_varints_round_trip_at_their_edges() {
        for value in [0, 1, -1, 63, -64, 64, 8191, -8192, i32::MAX, i32::MIN] {
            let mut out = Vec::new();
            write_zigzag(value, &mut out);
            assert!(out.len() <= MAX_VARINT_LEN);
            let mut offset = 0;
            assert_eq!(read_zigzag(&out, &mut offset), Ok(value), "{value}");
            assert_eq!(offset, out.len());
        }
    }

    #[test]
    fn zigzag_matches_the_serializers_bytes() {
        // 1 -> 2, -1 -> 1, 64 -> 128 = [0x80, 0x01]
        let mut out = Vec::new();
        for value in [1, -1, 64] {
            write_zigzag(value, &mut out);
        }
        assert_eq!(out, [2, 1, 0x80, 0x01]);
    }

    #[test]
    fn the_first_message_type_is_written_as_a_single_zero() {
        let framed = encode_protobuf_frame(9, &[0], b"pb");
        assert_eq!(framed, [0, 0, 0, 0, 9, 0, b'p', b'b']);
        let frame = decode_protobuf_frame(&framed).expect("[0] decodes");
        assert_eq!(frame.message_indexes, [0]);
        assert_eq!(frame.payload, b"pb");
    }

    #[test]
    fn nested_message_indexes_round_trip() {
        let framed = encode_protobuf_frame(9, &[1, 0, 300], b"pb");
        // count 3 -> 6, then 1 -> 2, 0 -> 0, 300 -> 600 = [0xd8, 0x04]
        assert_eq!(&framed[HEADER_LEN..framed.len() - 2], [6, 2, 0, 0xd8, 0x04]);
        let frame = decode_protobuf_frame(&framed).expect("indexes just written decode");
        assert_eq!(frame.message_indexes, [1, 0, 300]);
        assert_eq!(frame.payload, b"pb");
    }

    #[test]
    fn a_varint_cut_off_is_truncated_at_its_offset() {
        assert_eq!(
            decode_protobuf_frame(&[0, 0, 0, 0, 1]),
            Err(WireError::TruncatedVarint { offset: 5 })
        );
        assert_eq!(
            decode_protobuf_frame(&[0, 0, 0, 0, 1, 4, 2, 0x80]),
            Err(WireError::TruncatedVarint { offset: 7 })
        );
    }

    #[test]
    fn a_varint_over_32_bits_is_too_long() {
        let bytes = [0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x1f];
        assert_eq!(
            decode_protobuf_frame(&bytes),
            Err(WireError::VarintTooLong { offset: 5 })
        );
        let bytes = [0, 0, 0, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01];
        assert_eq!(
            decode_protobuf_frame(&bytes),
            Err(WireError::VarintTooLong { offset: 5 })
        );
    }

    #[test]
    fn a_count_the_bytes_cannot_hold_is_refused_before_allocating() {
        let mut bytes = vec![0, 0, 0, 0, 1];
        write_zigzag(i32::MAX, &mut bytes);
        assert_eq!(
            decode_protobuf_frame(&bytes),
            Err(WireError::BadIndexCount {
                count: i32::MAX,
                remaining: 0
            })
        );
        assert_eq!(
            decode_protobuf_frame(&[0, 0, 0, 0, 1, 1]),
            Err(WireError::BadIndexCount {
                count: -1,
                remaining: 0
            })
        );
    }

    #[test]
    fn a_negative_message_index_is_refused_with_its_position() {
        assert_eq!(
            decode_protobuf_frame(&[0, 0, 0, 0, 1, 4, 0, 1]),
            Err(WireError::NegativeMessageIndex {
                position: 1,
                index: -1
            })
        );
    }
}
