//! Reading a consumed record's headers through librdkafka's C API: the only
//! `unsafe` code of the workspace (the crate's lints deny it elsewhere).

use rdkafka::message::BorrowedMessage;

/// A consumed record's headers, read from librdkafka directly: rdkafka's
/// own reader panics on a header name that is not UTF-8, which any
/// producer can send, and a panic on the poll thread would stop the
/// consumer at that record on every restart. Names are taken as bytes
/// here and read lossily (`U+FFFD` for what is not UTF-8).
#[allow(unsafe_code)]
pub(crate) struct RawHeaders<'a> {
    hdrs: *const rdkafka::bindings::rd_kafka_headers_t,
    count: usize,
    record: std::marker::PhantomData<&'a BorrowedMessage<'a>>,
}

#[allow(unsafe_code)]
impl<'a> RawHeaders<'a> {
    pub(crate) fn of(record: &'a BorrowedMessage<'_>) -> Self {
        use rdkafka::bindings as rdsys;
        let mut hdrs: *mut rdsys::rd_kafka_headers_t = std::ptr::null_mut();
        // SAFETY: the record pointer is valid while `record` is borrowed;
        // librdkafka parses the headers into storage the message owns and
        // frees with it, so `hdrs` lives as long as the record.
        let err = unsafe { rdsys::rd_kafka_message_headers(record.ptr(), &mut hdrs) };
        let count =
            if err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && !hdrs.is_null() {
                // SAFETY: `hdrs` is the record's valid header list.
                unsafe { rdsys::rd_kafka_header_cnt(hdrs) }
            } else {
                // NOENT: the record has no headers.
                0
            };
        Self {
            hdrs,
            count,
            record: std::marker::PhantomData,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// `(name, value)` in record order; a null value reads as empty.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone + '_ {
        use rdkafka::bindings as rdsys;
        (0..self.count).map_while(|idx| {
            let mut name: *const std::ffi::c_char = std::ptr::null();
            let mut value: *const std::ffi::c_void = std::ptr::null();
            let mut size = 0usize;
            // SAFETY: `hdrs` is valid (see `of`) and `idx` below its count.
            let err = unsafe {
                rdsys::rd_kafka_header_get_all(self.hdrs, idx, &mut name, &mut value, &mut size)
            };
            if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
                return None;
            }
            // SAFETY: librdkafka keeps each name NUL-terminated and each
            // value `size` bytes long, both owned by the record.
            let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
            let value = if value.is_null() {
                &[][..]
            } else {
                // SAFETY: as above.
                unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }
            };
            Some((name, value))
        })
    }
}
