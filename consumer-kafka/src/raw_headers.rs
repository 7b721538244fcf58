//! Reading a consumed record's headers through librdkafka's C API: the only
//! `unsafe` code of the workspace (the crate's lints deny it elsewhere).

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};

use rdkafka::bindings as rdsys;
use rdkafka::message::BorrowedMessage;

/// Header-name comparisons librdkafka may make while telling cut names from
/// whole ones (see [`RawHeaders`]); past it, a header still in doubt is
/// taken as cut, which costs a record that sends a great many null-valued
/// headers its framework headers, never a wrong name.
const CONFIRM_BUDGET: usize = 1 << 22;

/// A consumed record's headers, read from librdkafka directly: rdkafka's
/// own reader panics on a header name that is not UTF-8, which any
/// producer can send, and a panic on the poll thread would stop the
/// consumer at that record on every restart. Names are taken as bytes
/// here and read lossily (`U+FFFD` for what is not UTF-8).
///
/// librdkafka hands names out as C strings, so a name with a NUL byte
/// (`ce_id\0junk`, which any Kafka client can write) would read cut at the
/// NUL, as `ce_id`, and could pass for a header it is not. Such a name is
/// yielded with the NUL it was cut at (`ce_id\0`): it then matches no
/// header name the framework or a handler looks up. librdkafka keeps each
/// name's full length and matches names by it in `rd_kafka_header_get`,
/// which is how a cut name is told from a whole one.
#[allow(unsafe_code)]
pub(crate) struct RawHeaders<'a> {
    hdrs: *const rdsys::rd_kafka_headers_t,
    count: usize,
    /// Indices of the headers whose name is longer than its C string,
    /// ascending; empty for every record a usual client writes.
    cut: Vec<usize>,
    record: std::marker::PhantomData<&'a BorrowedMessage<'a>>,
}

#[allow(unsafe_code)]
impl<'a> RawHeaders<'a> {
    pub(crate) fn of(record: &'a BorrowedMessage<'_>) -> Self {
        let mut hdrs: *mut rdsys::rd_kafka_headers_t = std::ptr::null_mut();
        // SAFETY: the record pointer is valid while `record` is borrowed;
        // librdkafka parses the headers into storage the message owns and
        // frees with it, so `hdrs` lives as long as the record.
        let err = unsafe { rdsys::rd_kafka_message_headers(record.ptr(), &mut hdrs) };
        if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || hdrs.is_null() {
            // NOENT: the record has no headers.
            return Self::over(std::ptr::null(), 0);
        }
        // SAFETY: `hdrs` is the record's valid header list.
        let count = unsafe { rdsys::rd_kafka_header_cnt(hdrs) };
        Self::over(hdrs, count)
    }

    /// The headers of the list `hdrs` (null, or valid for `'a`) of `count`.
    fn over(hdrs: *const rdsys::rd_kafka_headers_t, count: usize) -> Self {
        let mut raw = Self {
            hdrs,
            count,
            cut: Vec::new(),
            record: std::marker::PhantomData,
        };
        raw.cut = raw.cut_names();
        raw
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Header `idx`: its name as a C string, its value pointer and size.
    fn entry(&self, idx: usize) -> Option<(&'a CStr, *const c_void, usize)> {
        if self.hdrs.is_null() {
            return None;
        }
        let mut name: *const c_char = std::ptr::null();
        let mut value: *const c_void = std::ptr::null();
        let mut size = 0usize;
        // SAFETY: `hdrs` is valid (see `of`); librdkafka checks `idx`.
        let err = unsafe {
            rdsys::rd_kafka_header_get_all(self.hdrs, idx, &mut name, &mut value, &mut size)
        };
        if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return None;
        }
        // SAFETY: librdkafka keeps each name NUL-terminated, owned by the
        // record.
        Some((unsafe { CStr::from_ptr(name) }, value, size))
    }

    /// Which headers have a name cut short by a NUL byte.
    ///
    /// librdkafka stores a header as its name, a NUL, then its value, so a
    /// value that starts right after the name's C string belongs to a whole
    /// name: a pointer comparison settles every usual header without a
    /// lookup. The others (a null value, or a value further on) are
    /// confirmed by librdkafka's exact-length lookup: a header is whole
    /// when `rd_kafka_header_get` finds it under the name it reads as.
    fn cut_names(&self) -> Vec<usize> {
        let mut doubtful: Vec<(usize, &'a CStr, *const c_void)> = Vec::new();
        for idx in 0..self.count {
            let Some((name, value, _)) = self.entry(idx) else {
                break;
            };
            let after_name = (name.as_ptr() as usize).wrapping_add(name.to_bytes().len() + 1);
            if value.is_null() || value as usize != after_name {
                doubtful.push((idx, name, value));
            }
        }
        if doubtful.is_empty() {
            return Vec::new();
        }
        // The values librdkafka finds under each doubtful name, exactly.
        let mut budget = CONFIRM_BUDGET;
        let mut exact: HashMap<&CStr, Option<Vec<*const c_void>>> = HashMap::new();
        let mut cut = Vec::new();
        let mut nulls_taken: HashMap<&CStr, usize> = HashMap::new();
        for (idx, name, value) in doubtful {
            let found = exact
                .entry(name)
                .or_insert_with(|| self.exact_values(name, &mut budget));
            let whole = match found {
                // Over budget: in doubt, taken as cut.
                None => false,
                Some(values) if !value.is_null() => values.contains(&value),
                // Null values cannot be told apart by pointer: as many of
                // them are whole as librdkafka finds, the first ones taken.
                Some(values) => {
                    let whole_nulls = values.iter().filter(|v| v.is_null()).count();
                    let taken = nulls_taken.entry(name).or_default();
                    *taken += 1;
                    *taken <= whole_nulls
                }
            };
            if !whole {
                cut.push(idx);
            }
        }
        cut
    }

    /// The value pointers of every header named exactly `name`, or `None`
    /// once `budget` (header comparisons) is spent.
    fn exact_values(&self, name: &CStr, budget: &mut usize) -> Option<Vec<*const c_void>> {
        let mut values = Vec::new();
        for k in 0..self.count {
            // Each lookup walks the list from its start.
            *budget = budget.checked_sub(self.count)?;
            let mut value: *const c_void = std::ptr::null();
            let mut size = 0usize;
            // SAFETY: `hdrs` is valid and `name` NUL-terminated.
            let err = unsafe {
                rdsys::rd_kafka_header_get(self.hdrs, k, name.as_ptr(), &mut value, &mut size)
            };
            if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                break;
            }
            values.push(value);
        }
        Some(values)
    }

    /// `(name, value)` in record order; a null value reads as empty, and a
    /// name cut at a NUL byte keeps that NUL (`ce_id\0`).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone + '_ {
        (0..self.count).map_while(|idx| {
            let (name, value, size) = self.entry(idx)?;
            let name = if self.cut.binary_search(&idx).is_ok() {
                name.to_bytes_with_nul()
            } else {
                name.to_bytes()
            };
            let value = if value.is_null() {
                &[][..]
            } else {
                // SAFETY: librdkafka keeps each value `size` bytes long,
                // owned by the record.
                unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }
            };
            Some((name, value))
        })
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    /// What `RawHeaders` reads from a header list built with these names
    /// and values, each name added with its full length.
    fn read(headers: &[(&[u8], Option<&[u8]>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        // SAFETY: the list is built, read and destroyed here; every pointer
        // passed outlives its call (librdkafka copies names and values).
        unsafe {
            let hdrs = rdsys::rd_kafka_headers_new(headers.len());
            for (name, value) in headers {
                let (v, len) = match value {
                    Some(v) => (v.as_ptr().cast::<c_void>(), v.len()),
                    None => (std::ptr::null(), 0),
                };
                let err = rdsys::rd_kafka_header_add(
                    hdrs,
                    name.as_ptr().cast(),
                    isize::try_from(name.len()).expect("name length"),
                    v,
                    isize::try_from(len).expect("value length"),
                );
                assert_eq!(err, rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
            }
            let raw = RawHeaders::over(hdrs, rdsys::rd_kafka_header_cnt(hdrs));
            let out = raw.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            rdsys::rd_kafka_headers_destroy(hdrs);
            out
        }
    }

    #[test]
    fn a_name_cut_at_a_nul_byte_keeps_the_nul_and_whole_names_read_as_they_are() {
        let got = read(&[
            (b"ce_id", Some(b"real")),
            (b"ce_id\0junk", Some(b"forged")),
            (b"traceparent", None),
            (b"traceparent\0", None),
            (b"x-tenant\0", Some(b"")),
            (b"empty", Some(b"")),
        ]);
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"ce_id".to_vec(), b"real".to_vec()),
            (b"ce_id\0".to_vec(), b"forged".to_vec()),
            (b"traceparent".to_vec(), Vec::new()),
            (b"traceparent\0".to_vec(), Vec::new()),
            (b"x-tenant\0".to_vec(), Vec::new()),
            (b"empty".to_vec(), Vec::new()),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn usual_headers_are_settled_without_a_lookup() {
        // The pointer comparison `cut_names` relies on: librdkafka stores a
        // value right after its name's NUL. Were that to change, every
        // header would go through the lookup (slower, still right).
        // SAFETY: as in `read`.
        unsafe {
            let hdrs = rdsys::rd_kafka_headers_new(1);
            let err =
                rdsys::rd_kafka_header_add(hdrs, c"ce_type".as_ptr(), -1, b"x".as_ptr().cast(), 1);
            assert_eq!(err, rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
            let raw = RawHeaders::over(hdrs, 1);
            let (name, value, _) = raw.entry(0).expect("one header");
            assert_eq!(
                value as usize,
                name.as_ptr() as usize + name.to_bytes().len() + 1
            );
            assert!(raw.cut.is_empty());
            rdsys::rd_kafka_headers_destroy(hdrs);
        }
    }
}
