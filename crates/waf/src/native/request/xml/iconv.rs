//! glibc's converters (`iconv(3)`), through which libxml2 reads an XML body whose declaration
//! names an encoding it has no converter of its own for (Shift_JIS, GBK, KOI8-R, EBCDIC, ...).
//! Reading such a body as anything else is reading it more laxly than libmodsecurity: a
//! fullwidth `<script>` in Shift_JIS is, once converted, what CRS's `t:utf8toUnicode` folds
//! back to ASCII; read as ISO-8859-1 it is noise no rule matches.
#![expect(
    unsafe_code,
    reason = "FFI to glibc's iconv(3), the converters libxml2 itself calls: no crate wraps \
              glibc's own (encoding_rs has other tables and names)"
)]

use std::ffi::CString;

/// Where a conversion stopped.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// Every byte converted.
    End,
    /// At a sequence not in the encoding, this many bytes in (libxml2's converter error).
    Invalid(usize),
    /// At an incomplete last character (more bytes would be needed).
    Incomplete,
}

/// `input` converted from `encoding` to UTF-8 as far as it converts, and where it stopped;
/// `None` where glibc has no converter for `encoding` both ways (libxml2 asks for both, and
/// takes neither without the other).
pub(super) fn to_utf8(encoding: &str, input: &[u8]) -> Option<(String, Stop)> {
    let from = Converter::open("UTF-8", encoding)?;
    // libxml2 also opens the way back, and refuses an encoding without it.
    Converter::open(encoding, "UTF-8")?;
    Some(from.convert(input))
}

/// One `iconv_t`, closed when dropped.
struct Converter(libc::iconv_t);

impl Converter {
    fn open(to: &str, from: &str) -> Option<Converter> {
        let (to, from) = (CString::new(to).ok()?, CString::new(from).ok()?);
        // SAFETY: both arguments are NUL-terminated strings that outlive the call.
        let cd = unsafe { libc::iconv_open(to.as_ptr(), from.as_ptr()) };
        // `(iconv_t) -1` is the failure value.
        (cd as isize != -1).then_some(Converter(cd))
    }

    /// All of `input` it converts, in one pass: a stateful encoding (ISO-2022-JP) keeps its
    /// shift state from chunk to chunk of the output buffer.
    fn convert(&self, input: &[u8]) -> (String, Stop) {
        let mut out: Vec<u8> = Vec::with_capacity(input.len() * 2 + 16);
        let mut in_ptr = input.as_ptr().cast::<libc::c_char>().cast_mut();
        let mut in_left = input.len();
        let stop = loop {
            let spare = out.spare_capacity_mut();
            let room = spare.len();
            let mut out_ptr = spare.as_mut_ptr().cast::<libc::c_char>();
            let mut out_left = room;
            // SAFETY: `in_ptr`/`in_left` describe the unread rest of `input` (iconv only reads
            // through it, despite the `*mut` in its signature), `out_ptr`/`out_left` the
            // spare capacity of `out`; iconv advances each pointer by what it consumed or
            // wrote and lowers each count to match. `self.0` is an open descriptor.
            let n = unsafe {
                libc::iconv(
                    self.0,
                    &mut in_ptr,
                    &mut in_left,
                    &mut out_ptr,
                    &mut out_left,
                )
            };
            let errno = std::io::Error::last_os_error().raw_os_error();
            // SAFETY: iconv wrote `room - out_left` initialized bytes after `len()`.
            unsafe { out.set_len(out.len() + room - out_left) };
            if n != usize::MAX {
                break Stop::End;
            }
            match errno {
                // The output is full: room for as much again, and on.
                Some(libc::E2BIG) => out.reserve(out.capacity().max(64)),
                Some(libc::EINVAL) => break Stop::Incomplete,
                _ => break Stop::Invalid(input.len() - in_left),
            }
        };
        // glibc's converters to UTF-8 write UTF-8; a lossy read keeps this safe if one did not.
        let text = match String::from_utf8(out) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        (text, stop)
    }
}

impl Drop for Converter {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from a successful `iconv_open` and is closed once, here.
        unsafe { libc::iconv_close(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::{Stop, to_utf8};

    #[test]
    fn converts_multibyte_and_stateful_encodings_as_glibc_reads_them() {
        // Fullwidth "<s>" in Shift_JIS, then GBK's "中".
        assert_eq!(
            to_utf8("Shift_JIS", b"\x81\x83\x82\x93\x81\x84"),
            Some(("\u{ff1c}\u{ff53}\u{ff1e}".to_string(), Stop::End))
        );
        assert_eq!(
            to_utf8("gbk", b"a\xd6\xd0b"),
            Some(("a中b".to_string(), Stop::End))
        );
        // ISO-2022-JP shifts into JIS X 0208 and back: "あ".
        assert_eq!(
            to_utf8("ISO-2022-JP", b"x\x1b$B$\"\x1b(By"),
            Some(("xあy".to_string(), Stop::End))
        );
        // EBCDIC (IBM037): "<a>".
        assert_eq!(
            to_utf8("IBM037", b"\x4c\x81\x6e"),
            Some(("<a>".to_string(), Stop::End))
        );
    }

    #[test]
    fn stops_where_glibc_stops_and_knows_no_name_it_does_not() {
        // 0xA5 is not in ISO-8859-3: the text before it, and where.
        assert_eq!(
            to_utf8("ISO-8859-3", b"ab\xa5cd"),
            Some(("ab".to_string(), Stop::Invalid(2)))
        );
        // A Shift_JIS lead byte at the end needs its trail byte.
        assert_eq!(
            to_utf8("SHIFT_JIS", b"ab\x82"),
            Some(("ab".to_string(), Stop::Incomplete))
        );
        assert_eq!(to_utf8("no-such-encoding", b"ab"), None);
        // A long input crosses the output buffer's growth.
        let long = vec![b'x'; 100_000];
        let (text, stop) = to_utf8("KOI8-R", &long).unwrap();
        assert_eq!((text.len(), stop), (100_000, Stop::End));
    }
}
