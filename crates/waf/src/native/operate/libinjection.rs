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
///
/// A value without `<` and `=` never does, and is not handed to it. libinjection reads the
/// value in five HTML contexts and flags only these tokens: a doctype, a comment or a tag
/// name (each opened by `<`), or an attribute's value after a black-listed name (a value
/// follows a name only after `=`; the quoted contexts' first value has no name before
/// it). Most of a request's values have neither byte (a browser's User-Agent, cookie and
/// query values), and each call cost about 4,000 instructions (CRS's 941100 asks nine
/// values of a benign GET).
pub(super) fn xss(value: &[u8]) -> bool {
    if !value.iter().any(|&b| b == b'<' || b == b'=') {
        return false;
    }
    xss_always(value)
}

/// [`xss`] without the shortcut: libinjection asked every time.
fn xss_always(value: &[u8]) -> bool {
    // SAFETY: the pointer is valid for `value.len()` bytes and a NUL after them
    // (`terminated`); libinjection only reads it and keeps nothing after returning.
    terminated(value, |input| unsafe {
        sluice_libinjection_xss(input, value.len())
    }) != 0
}

#[cfg(test)]
mod tests {
    use super::xss_always;

    /// libinjection flags no value without `<` and `=`: values of every other piece its
    /// tokenizer acts on (quotes, white space, NUL, `>`, `/`, black-listed attribute names
    /// and URLs, comment ends, conditional comments), 200,000 of them, each also asked
    /// with a `=` after its first word to show the pieces do reach a flag with one.
    #[test]
    fn no_value_without_a_tag_or_an_equals_sign_is_xss() {
        #[rustfmt::skip]
        let pieces: &[&[u8]] = &[
            b">", b"/", b" ", b"\t", b"\n", b"\x0b", b"\x0c", b"\r", b"\0", b"\"", b"'", b"`",
            b"onerror", b"onload", b"style", b"src", b"href", b"xmlns", b"formaction",
            b"javascript:alert(1)", b"data:text/html", b"vbscript:", b"-->", b"[if", b"xml",
            b"!", b"?", b"&lt;", b"%3C", b"script", b"a", b"1", b"\xff",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut flagged_with_equals = 0;
        for _ in 0..200_000 {
            let len = next(8);
            let value: Vec<u8> = (0..len)
                .flat_map(|_| pieces[next(pieces.len())].to_vec())
                .collect();
            assert!(
                !xss_always(&value),
                "libinjection flags {:?}",
                String::from_utf8_lossy(&value)
            );
            let mut with = b"onerror=".to_vec();
            with.extend_from_slice(&value);
            flagged_with_equals += usize::from(xss_always(&with));
        }
        assert!(flagged_with_equals > 100_000, "{flagged_with_equals}");
    }
}
