//! A multipart/form-data body as libmodsecurity 3.0.9 reads it (`multipart.cc`), quirks
//! included: the verdicts of rules on FILES, ARGS_POST, MULTIPART_STRICT_ERROR and their
//! like must be libmodsecurity's, so this is a port of its state machine, not a MIME parser.
//!
//! The body is cut into lines (at most [`BUF_SIZE`] bytes; a longer line is cut into
//! chunks) and each line is a boundary, a part header or part data, as `Multipart::process`
//! decides. What libmodsecurity does that a reader might not expect, and this does too:
//!
//! - an error in a part header (no colon, no Content-Disposition, a bad one, a NUL) is
//!   recorded but does not stop the parse, and the part stays in its header state, so the
//!   lines that follow are read as headers; a later error replaces the message, and a body
//!   whose final boundary never came ends with "Final boundary missing." whatever came
//!   before, and gives no fields and no files, not even the parts that were finished;
//! - any line of data that starts with `--` and is not the boundary, or holds `--` and the
//!   boundary, sets MULTIPART_UNMATCHED_BOUNDARY to 1 (a later boundary sets it to 2);
//! - a part's line endings are held back two bytes at a time so that the one before a
//!   boundary is not data; for a form field the bytes held back are then lost (3.0.9 assigns
//!   them and overwrites them), so a field's lines run together;
//! - fields go to ARGS and ARGS_POST directly, not through `addArgument`, so
//!   ARGS_COMBINED_SIZE does not count them;
//! - a part with `filename=""` is a field, and a duplicate part header is dropped silently.
//!
//! Files are never written: libmodsecurity writes them only with `SecUploadKeepFiles` or
//! `SecTmpSaveUploadedFiles` on, and Sluice keeps no upload directory. So FILES_TMPNAMES
//! and FILES_TMP_CONTENT stay empty, and the upload file limit (`SecUploadFileLimit`),
//! which 3.0.9 checks only for a file it writes, is never exceeded: the flag it raises
//! (part of MULTIPART_STRICT_ERROR) stays 0, as in libmodsecurity without those settings.

mod content_type;
mod part;
mod state;

use state::{AFTER_LF, BUF_SIZE, Parser, at, cstr, is_space, starts_at, strlen};

/// One file part.
#[derive(Debug, Clone)]
pub(super) struct File {
    /// Its `name` (FILES' and FILES_NAMES' key).
    pub(super) name: Vec<u8>,
    /// Its `filename` (FILES' value).
    pub(super) filename: Vec<u8>,
    /// Its content's length (FILES_SIZES).
    pub(super) size: usize,
}

/// What a multipart body gives.
#[derive(Debug, Clone, Default)]
pub(super) struct Multipart {
    /// Form fields, in body order (ARGS and ARGS_POST, not ARGS_COMBINED_SIZE).
    pub(super) args: Vec<(Vec<u8>, Vec<u8>)>,
    /// File parts, in body order.
    pub(super) files: Vec<File>,
    /// `(part name, header line)` for MULTIPART_PART_HEADERS.
    pub(super) part_headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// FILES_COMBINED_SIZE, where libmodsecurity sets it (when there is a file).
    pub(super) files_combined_size: Option<usize>,
    /// MULTIPART_STRICT_ERROR ("0"/"1"; empty where not set).
    pub(super) strict_error: &'static [u8],
    /// MULTIPART_UNMATCHED_BOUNDARY ("0", "1" or "2"; empty where not set).
    pub(super) unmatched_boundary: &'static [u8],
    /// The body's length without its files (against `SecRequestBodyNoFilesLimit`).
    pub(super) no_files_length: u64,
    /// The parse error, as libmodsecurity writes it after "Multipart parsing error: "
    /// (bytes: it may quote the body).
    pub(super) error: Option<Vec<u8>>,
}

/// `body` with the boundary `content_type` (the first Content-Type header) names. Without
/// a Content-Type header libmodsecurity runs no multipart processor at all: nothing is set.
pub(super) fn parse(content_type: Option<&[u8]>, body: &[u8]) -> Multipart {
    let Some(content_type) = content_type else {
        return Multipart::default();
    };
    let mut p = Parser::default();
    if p.init(content_type) {
        p.process(body);
    }
    p.complete()
}

impl Parser {
    fn fail(&mut self, message: impl Into<Vec<u8>>) {
        self.error = Some(message.into());
    }

    /// `Multipart::process` with the whole body: stops early on an error that libmodsecurity
    /// stops on (a bad boundary line, an over-long header line), leaving the line in `buf`.
    fn process(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.seen_data = true;
        let mut i = 0;
        while i < data.len() {
            let c = data[i];
            // A CR is not taken as the buffer's last byte: the buffer is processed without it.
            let full_before_cr = c == b'\r' && self.buf.len() == BUF_SIZE - 1;
            if !full_before_cr {
                self.buf.push(c);
                i += 1;
            }
            if (c == b'\n' || self.buf.len() == BUF_SIZE || full_before_cr)
                && !self.chunk(c, full_before_cr)
            {
                return;
            }
            if c == b'\r' {
                self.crlf_state = 1;
            } else if c != b'\n' {
                self.crlf_state = 0;
            }
            if self.is_complete && i < data.len() {
                self.flags.data_after = true;
                return;
            }
        }
    }

    /// One line (or piece of one) in `buf`, ended by `c`: a boundary, or data for the part.
    /// False where libmodsecurity stops reading the body.
    fn chunk(&mut self, c: u8, full_before_cr: bool) -> bool {
        let boundary = match self.boundary_line() {
            Ok(b) => b,
            Err(()) => {
                self.flags.error = true;
                return false;
            }
        };
        if !boundary {
            if self.part.is_none() {
                self.flags.data_before = true;
            } else if !self.in_data {
                if self.buf.len() == BUF_SIZE || full_before_cr {
                    self.flags.error = true;
                    self.fail(format!(
                        "Multipart: Part header line over {BUF_SIZE} bytes long"
                    ));
                    return false;
                }
                self.part_header();
            } else {
                self.part_data();
            }
        }
        self.buf.clear();
        self.buf_contains_line = c == b'\n';
        if c == b'\n' {
            self.crlf_state = if self.crlf_state == 1 { 3 } else { AFTER_LF };
        }
        self.crlf_state_buf_end = self.crlf_state;
        true
    }

    /// Whether `buf` is a boundary line, processed as one (the part before it finished);
    /// the flags a line that looks like one raises; Err for a malformed boundary line.
    fn boundary_line(&mut self) -> Result<bool, ()> {
        let buf = &self.buf;
        let len = strlen(buf);
        if !(self.buf_contains_line && len > 3 && buf.starts_with(b"--")) {
            if self.buf_contains_line
                && (0..buf.len()).any(|i| {
                    buf[i] == b'-'
                        && i + 1 < buf.len()
                        && buf[i + 1] == b'-'
                        && starts_at(buf, i + 2, &self.boundary)
                })
            {
                self.flags.unmatched_boundary = 1;
            }
            return Ok(false);
        }
        let blen = self.boundary.len();
        if !(len >= blen + 2 && starts_at(buf, 2, &self.boundary)) {
            return self.unmatched_line().map(|()| false);
        }
        if self.crlf_state_buf_end == AFTER_LF {
            self.flags.lf_line = true;
        }
        if !self.data_read && self.boundary_count > 0 {
            // Ours, but where the part's data should begin: data.
            self.flags.invalid_part = true;
            return Ok(false);
        }
        let mut end = 2 + blen;
        if self.boundary_count > 0 {
            self.flags.unmatched_boundary = 2;
        }
        let is_final = at(buf, end) == b'-' && at(buf, end + 1) == b'-';
        if is_final {
            end += 2;
            if self.is_complete {
                self.fail("Multipart: Invalid boundary (final duplicate).");
                return Err(());
            }
        }
        let crlf = at(buf, end) == b'\r' && at(buf, end + 1) == b'\n' && at(buf, end + 2) == 0;
        let lf = at(buf, end) == b'\n' && at(buf, end + 1) == 0;
        if !(crlf || lf) {
            let message = [b"Multipart: Invalid boundary: ", cstr(buf)].concat();
            self.fail(message);
            return Err(());
        }
        if lf {
            self.flags.lf_line = true;
        } else {
            self.flags.crlf_line = true;
        }
        self.finish_part(is_final);
        if is_final {
            self.is_complete = true;
        }
        self.boundary_count += 1;
        Ok(true)
    }

    /// A line starting `--` that is not our boundary: an error where it is ours quoted or
    /// after white space, else MULTIPART_UNMATCHED_BOUNDARY.
    fn unmatched_line(&mut self) -> Result<(), ()> {
        let buf = &self.buf;
        let b = &self.boundary;
        if self.flags.boundary_quoted
            && strlen(buf) >= b.len() + 3
            && buf[2] == b'"'
            && starts_at(buf, 3, b)
        {
            self.fail("Multipart: Invalid boundary (quotes).");
            return Err(());
        }
        let mut p = 2;
        while is_space(at(buf, p)) {
            p += 1;
        }
        if p != 2 && starts_at(buf, p, b) {
            self.fail("Multipart: Invalid boundary (whitespace).");
            return Err(());
        }
        self.flags.unmatched_boundary = 1;
        Ok(())
    }

    /// `multipart_complete`: the flags, the final boundary if it came without a line
    /// ending, the errors for a body that did not end, and the parts as fields and files.
    fn complete(mut self) -> Multipart {
        let mut strict = self.flags.strict_error();
        let unmatched = self.flags.unmatched_boundary;
        if self.seen_data && !self.is_complete {
            if self.boundary_count > 0 {
                if self.buf_contains_line && self.final_boundary_unended() {
                    if self.crlf_state_buf_end == AFTER_LF && !self.flags.lf_line {
                        self.flags.lf_line = true;
                        strict = true;
                    }
                    if !self.data_read && !self.flags.invalid_part {
                        self.flags.invalid_part = true;
                        strict = true;
                    }
                    self.finish_part(true);
                    self.is_complete = true;
                }
                if !self.is_complete {
                    self.fail("Multipart: Final boundary missing.");
                }
            } else {
                self.fail("Multipart: No boundaries found in payload.");
            }
        }
        // A body that did not end gives no fields and no files, even finished ones.
        let ended = !self.seen_data || self.is_complete;
        let mut out = Multipart {
            part_headers: self.part_headers,
            strict_error: if strict { b"1" } else { b"0" },
            unmatched_boundary: match unmatched {
                0 => b"0",
                1 => b"1",
                _ => b"2",
            },
            no_files_length: self.no_files_length,
            error: self.error,
            ..Multipart::default()
        };
        for p in self.parts.into_iter().filter(|_| ended) {
            if p.is_file {
                let total = out.files_combined_size.unwrap_or(0) + p.file_size;
                out.files_combined_size = Some(total);
                out.files.push(File {
                    name: p.name,
                    filename: p.filename,
                    size: p.file_size,
                });
            } else {
                out.args.push((p.name, p.value));
            }
        }
        out
    }

    /// Whether `buf` holds exactly `--BOUNDARY--` (the body ended right after it).
    fn final_boundary_unended(&self) -> bool {
        let b = &self.boundary;
        self.buf.len() == 4 + b.len()
            && self.buf.starts_with(b"--")
            && starts_at(&self.buf, 2, b)
            && self.buf.ends_with(b"--")
    }
}

#[cfg(all(test, feature = "modsecurity"))]
mod tests;
