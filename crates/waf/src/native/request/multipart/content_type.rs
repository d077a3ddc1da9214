//! The boundary from the Content-Type header, as `Multipart::init` finds it: what it
//! tolerates (one semicolon, white space around `=`, quotes, a parameter after the
//! boundary) raises a flag, what it does not is an error and no body is read.

use super::state::{Parser, is_space, strlen};

/// `boundary_characters_valid`: RFC 2046's `bchars`, a space allowed but not last.
fn boundary_characters_valid(b: &[u8]) -> bool {
    let b = &b[..strlen(b)];
    b.iter().enumerate().all(|(i, &c)| {
        c.is_ascii_alphanumeric() || (c == b' ' && i + 1 < b.len()) || b"'()+_,-./:=?".contains(&c)
    })
}

/// `count_boundary_params`: how many times "boundary" (any case) appears with a `=`
/// somewhere after it.
fn count_boundary_params(s: &[u8]) -> usize {
    let lower = s.to_ascii_lowercase();
    let lower = &lower[..strlen(&lower)];
    let mut count = 0;
    let mut from = 0;
    while let Some(k) = find(&lower[from..], b"boundary") {
        from += k + 8;
        if lower[from..].contains(&b'=') {
            count += 1;
        }
    }
    count
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Parser {
    /// `Multipart::init`: false where no body is to be read (with an error, except for an
    /// empty boundary, which 3.0.9 refuses without one).
    pub(super) fn init(&mut self, header: &[u8]) -> bool {
        self.buf_contains_line = true;
        let header = &header[..strlen(header)];
        if header.is_empty() {
            self.flags.error = true;
            self.fail("Multipart: Content-Type header not available.");
            return false;
        }
        if header.len() > 1024 {
            return self.refuse("Multipart: Invalid boundary in C-T (length).");
        }
        if header.len() < 19 || !header[..19].eq_ignore_ascii_case(b"multipart/form-data") {
            return self.refuse("Multipart: Invalid MIME type.");
        }
        if count_boundary_params(header) > 1 {
            return self.refuse("Multipart: Multiple boundary parameters in C-T.");
        }
        let Some(at) = find(header, b"boundary") else {
            if count_boundary_params(header) > 0 {
                return self.refuse("Multipart: Invalid boundary in C-T (case sensitivity).");
            }
            return self.refuse("Multipart: Boundary not found in C-T.");
        };
        let mut seen_semicolon = false;
        for &c in &header[19.min(at)..at] {
            if is_space(c) {
                continue;
            }
            if !seen_semicolon && c == b';' {
                seen_semicolon = true;
            } else {
                return self.refuse("Multipart: Invalid boundary in C-T (malformed).");
            }
        }
        if !seen_semicolon {
            self.flags.missing_semicolon = true;
        }
        let Some(eq) = header[at + 8..].iter().position(|&c| c == b'=') else {
            return self.refuse("Multipart: Invalid boundary in C-T (malformed).");
        };
        for &c in &header[at + 8..at + 8 + eq] {
            if !is_space(c) {
                return self.refuse("Multipart: Invalid boundary in C-T (parameter name).");
            }
            self.flags.boundary_whitespace = true;
        }
        self.boundary_value(&header[at + 9 + eq..])
    }

    /// The rest of `init`: the value after `boundary=`.
    fn boundary_value(&mut self, b: &[u8]) -> bool {
        if b.first().is_some_and(|&c| is_space(c)) {
            self.flags.boundary_whitespace = true;
        }
        let len = b.len();
        if len >= 2 && b[0] == b'"' && b[len - 1] == b'"' {
            self.boundary = b[1..len - 1].to_vec();
            if self.boundary.is_empty() {
                return false;
            }
            self.flags.boundary_quoted = true;
        } else {
            if b.first() == Some(&b'"') || (len >= 2 && b[len - 1] == b'"') {
                return self.refuse("Multipart: Invalid boundary in C-T (quote).");
            }
            self.boundary = b.to_vec();
            if self.boundary.is_empty() {
                return false;
            }
        }
        if count_boundary_params(&self.boundary) != 0 {
            return self.refuse("Multipart: Invalid boundary in C-T (content).");
        }
        // Tolerated: a parameter (`; charset=...`) after the boundary.
        if !boundary_characters_valid(&self.boundary)
            && let Some(semi) = self.boundary.iter().position(|&c| c == b';')
        {
            self.boundary.truncate(semi);
        }
        if !boundary_characters_valid(&self.boundary) {
            return self.refuse("Multipart: Invalid boundary in C-T (characters).");
        }
        if self.boundary.is_empty() {
            return self.refuse("Multipart: Invalid boundary in C-T (empty).");
        }
        true
    }

    /// An error that stops `init`: `m_flag_error` and the message.
    fn refuse(&mut self, message: &str) -> bool {
        self.flags.error = true;
        self.fail(message);
        false
    }
}
