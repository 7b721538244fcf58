//! What a valid `traceparent` is, by the W3C rules.

/// The W3C Trace Context rules for `traceparent`, which are fixed-length
/// fields: `version-traceid-parentid-flags`, 2, 32, 16 and 2 lowercase hex
/// digits; version `ff` is invalid; an all-zero trace or parent id is
/// invalid; version `00` is exactly 55 characters, and a later version may
/// only append fields after a `-`. The propagator alone pads a short trace
/// id and takes one-digit fields, continuing traces that do not exist.
pub(super) fn is_w3c_traceparent(value: &str) -> bool {
    let b = value.as_bytes();
    let hex = |field: &[u8]| field.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    let zero = |field: &[u8]| field.iter().all(|c| *c == b'0');
    if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return false;
    }
    let (version, trace_id, parent_id, flags) = (&b[0..2], &b[3..35], &b[36..52], &b[53..55]);
    if !(hex(version) && hex(trace_id) && hex(parent_id) && hex(flags)) {
        return false;
    }
    if version == b"ff" || zero(trace_id) || zero(parent_id) {
        return false;
    }
    match version {
        b"00" => b.len() == 55,
        _ => b.len() == 55 || b[55] == b'-',
    }
}
