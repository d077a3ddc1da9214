//! libinjection, the copy libmodsecurity 3.0.9 bundles (`crates/waf/libinjection/`, built by
//! `build.rs` with its symbols renamed), called as ModSecurity's `@detectSQLi` and
//! `@detectXSS` call it. C never calls back into Rust here, so no panic can cross into it.
#![expect(
    unsafe_code,
    reason = "calls into libinjection, a C library, with buffers it only reads or fills"
)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int};

unsafe extern "C" {
    /// `int libinjection_sqli(const char* input, size_t slen, char fingerprint[])`
    /// (`libinjection.h`): writes at most 8 bytes, a NUL-terminated fingerprint.
    fn sluice_libinjection_sqli(
        input: *const c_char,
        slen: usize,
        fingerprint: *mut c_char,
    ) -> c_int;
    /// `int libinjection_xss(const char* s, size_t len)` (`libinjection.h`).
    fn sluice_libinjection_xss(s: *const c_char, len: usize) -> c_int;
}

thread_local! {
    /// The value with a NUL after it, as ModSecurity passes `std::string::c_str()`: should
    /// libinjection look one byte past `len`, it finds what it finds there.
    static TERMINATED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `f` with a pointer to `value` followed by a NUL.
fn terminated<T>(value: &[u8], f: impl FnOnce(*const c_char) -> T) -> T {
    TERMINATED.with(|buf| {
        let mut buf = buf.borrow_mut();
        buf.clear();
        buf.extend_from_slice(value);
        buf.push(0);
        let out = f(buf.as_ptr().cast());
        // A huge value once should not stay held by the thread.
        if buf.capacity() > 1 << 20 {
            *buf = Vec::new();
        }
        out
    })
}

/// `libinjection_sqli`: the fingerprint (up to 5 bytes, e.g. `s&sos`) when `value` looks
/// like SQL injection.
pub(super) fn sqli(value: &[u8]) -> Option<Vec<u8>> {
    let mut fingerprint = [0u8; 8];
    // SAFETY: the input pointer is valid for `value.len()` bytes and a NUL after them
    // (`terminated`); `fingerprint` is the 8-byte array the header asks for
    // (`char fingerprint[8]` in ModSecurity's detect_sqli.cc), which libinjection fills
    // with at most 5 bytes and a NUL. It keeps neither pointer after returning.
    let hit = terminated(value, |input| unsafe {
        sluice_libinjection_sqli(input, value.len(), fingerprint.as_mut_ptr().cast())
    });
    (hit != 0).then(|| {
        let len = fingerprint.iter().position(|&b| b == 0).unwrap_or(8);
        fingerprint[..len].to_vec()
    })
}

/// `libinjection_xss`: whether `value` looks like cross-site scripting.
pub(super) fn xss(value: &[u8]) -> bool {
    // SAFETY: the pointer is valid for `value.len()` bytes and a NUL after them
    // (`terminated`); libinjection only reads it and keeps nothing after returning.
    terminated(value, |input| unsafe {
        sluice_libinjection_xss(input, value.len())
    }) != 0
}
