//! libmodsecurity's multipart parser's state (`Multipart`, `MultipartPart`) and the
//! C-string helpers its code needs: the leaf that the line loop (`multipart.rs`), the parts
//! (`part.rs`) and the Content-Type reader (`content_type.rs`) share.

/// `MULTIPART_BUF_SIZE`: the longest line (or piece of one) looked at at once.
pub(super) const BUF_SIZE: usize = 4096;

/// The flags MULTIPART_STRICT_ERROR is the "or" of (`m_flag_*`). `file_limit_exceeded`
/// is left out: it cannot be raised here (see the module's doc).
#[derive(Debug, Default)]
pub(super) struct Flags {
    pub(super) error: bool,
    pub(super) data_before: bool,
    pub(super) data_after: bool,
    pub(super) header_folding: bool,
    pub(super) boundary_quoted: bool,
    pub(super) lf_line: bool,
    pub(super) crlf_line: bool,
    /// 0, 1 (a line looked like a boundary and was not ours) or 2 (ours after the first).
    pub(super) unmatched_boundary: u8,
    pub(super) boundary_whitespace: bool,
    pub(super) missing_semicolon: bool,
    pub(super) invalid_quoting: bool,
    pub(super) invalid_part: bool,
    pub(super) invalid_header_folding: bool,
}

impl Flags {
    pub(super) fn strict_error(&self) -> bool {
        self.error
            || self.boundary_quoted
            || self.boundary_whitespace
            || self.data_before
            || self.data_after
            || self.header_folding
            || self.lf_line
            || self.missing_semicolon
            || self.invalid_quoting
            || self.invalid_part
            || self.invalid_header_folding
    }
}

/// The line-ending state (`m_crlf_state`) after a lone LF.
pub(super) const AFTER_LF: u8 = 2;

/// libmodsecurity's `Multipart` while it reads one body.
#[derive(Debug, Default)]
pub(super) struct Parser {
    pub(super) boundary: Vec<u8>,
    /// The line being gathered (`m_buf` up to `m_bufptr`).
    pub(super) buf: Vec<u8>,
    /// Whether `buf` starts a line (the chunk before it ended with LF).
    pub(super) buf_contains_line: bool,
    /// 0: none, 1: after CR, 2: after a lone LF, 3: after CRLF.
    pub(super) crlf_state: u8,
    pub(super) crlf_state_buf_end: u8,
    /// The part being built (`m_mpp`), none before the first boundary and after the last.
    pub(super) part: Option<Part>,
    /// False while reading a part's headers, true for its data (`m_mpp_state`).
    pub(super) in_data: bool,
    /// Whether any data came since the part's empty line.
    pub(super) data_read: bool,
    /// The line ending held back from the last data chunk (`m_reserve`): its length.
    pub(super) reserve: usize,
    pub(super) seen_data: bool,
    pub(super) is_complete: bool,
    pub(super) boundary_count: usize,
    pub(super) flags: Flags,
    /// Finished parts with a name (`m_parts`).
    pub(super) parts: Vec<Part>,
    pub(super) part_headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) no_files_length: u64,
    /// The last error message assigned (`*error`), without the "Multipart parsing error".
    pub(super) error: Option<Vec<u8>>,
}

/// `MultipartPart`, as far as its variables need.
#[derive(Debug, Default)]
pub(super) struct Part {
    /// `filename` was given (not empty) and the header says `filename=`.
    pub(super) is_file: bool,
    pub(super) name: Vec<u8>,
    pub(super) filename: Vec<u8>,
    /// A field's value: its data chunks, each without its line ending.
    pub(super) value: Vec<u8>,
    /// A file's size, line endings within it included.
    pub(super) file_size: usize,
    /// The part's headers, keyed without regard to case.
    pub(super) headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) last_header_name: Vec<u8>,
    /// The header line being built: the raw line, or `name: value` once folded.
    pub(super) last_header_line: Vec<u8>,
    /// Finished header lines (MULTIPART_PART_HEADERS).
    pub(super) header_lines: Vec<Vec<u8>>,
}

impl Part {
    pub(super) fn header(&mut self, name: &[u8]) -> Option<&mut Vec<u8>> {
        self.headers
            .iter_mut()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Records the header line being built, if any.
    pub(super) fn end_header_line(&mut self) {
        if !self.last_header_line.is_empty() {
            let line = std::mem::take(&mut self.last_header_line);
            self.header_lines.push(line);
        }
    }
}

/// The byte at `i` of a NUL-terminated buffer: past its end, the terminator.
pub(super) fn at(s: &[u8], i: usize) -> u8 {
    s.get(i).copied().unwrap_or(0)
}

/// `strlen`: up to the first NUL.
pub(super) fn strlen(s: &[u8]) -> usize {
    s.iter().position(|&b| b == 0).unwrap_or(s.len())
}

/// `std::string(char *)`: the bytes before the first NUL.
pub(super) fn cstr(s: &[u8]) -> &[u8] {
    &s[..strlen(s)]
}

/// `strncmp(s + i, t, strlen(t)) == 0`, for a `t` without NUL.
pub(super) fn starts_at(s: &[u8], i: usize, t: &[u8]) -> bool {
    t.iter().enumerate().all(|(k, &b)| at(s, i + k) == b)
}

/// `isspace` in the C locale.
pub(super) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}
