//! A part: its header lines (`process_part_header`), its Content-Disposition
//! (`parse_content_disposition`), its data (`process_part_data`) and its end
//! (`process_boundary`).

use super::state::{BUF_SIZE, Parser, Part, at, is_space};

/// `utils::string::chomp`: trailing CRs and LFs dropped, unless there is nothing else.
fn chomp(s: &mut Vec<u8>) {
    if let Some(keep) = s.iter().rposition(|&b| b != b'\n' && b != b'\r') {
        s.truncate(keep + 1);
    }
}

/// `Multipart::is_token_char`.
fn is_token_char(c: u8) -> bool {
    c > 32 && c < 127 && !b"()<>@,;:\\\"/[]?=".contains(&c)
}

/// `mime_charset_special` and `attr_char_special`.
const MIME_CHARSET_SPECIAL: &[u8] = b"!#$%&+-^_`{}~";
const ATTR_CHAR_SPECIAL: &[u8] = b"!#$&+-.^_`~";

impl Parser {
    fn part_mut(&mut self) -> &mut Part {
        self.part.as_mut().expect("a part is being built")
    }

    /// `process_part_header` for the line in `buf`. Its errors do not stop the parse.
    pub(super) fn part_header(&mut self) {
        let line = std::mem::take(&mut self.buf);
        self.header_line(&line);
        self.buf = line;
    }

    fn header_line(&mut self, line: &[u8]) {
        if line.contains(&0) {
            self.fail("Multipart: Nul byte in part headers.");
            return;
        }
        let len = line.len();
        self.no_files_length += len as u64;
        let mut content = len as isize - 1;
        if len > 1 && line[len - 2] == b'\r' {
            self.flags.crlf_line = true;
            content -= 1;
        } else {
            self.flags.lf_line = true;
        }
        if line == b"\r\n" || line == b"\n" {
            self.headers_end();
        } else if is_space(line[0]) {
            self.folded_line(line);
        } else {
            let part = self.part_mut();
            part.end_header_line();
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                let message = [b"Multipart: Invalid part header (colon missing): ", line].concat();
                self.fail(message);
                return;
            };
            if colon == 0 {
                self.fail("Multipart: Invalid part header (header name missing).");
                return;
            }
            let name = &line[..colon];
            let mut d = colon + 1;
            while matches!(at(line, d), b'\t' | b' ') {
                d += 1;
            }
            let mut value = line[d..].to_vec();
            chomp(&mut value);
            // A duplicate is dropped, without an error.
            if part.header(name).is_some() {
                return;
            }
            part.last_header_name = name.to_vec();
            part.headers.push((name.to_vec(), value));
            part.last_header_line = if content > 0 {
                line.to_vec()
            } else {
                Vec::new()
            };
        }
    }

    /// A header line that starts with white space: folded into the last header.
    fn folded_line(&mut self, line: &[u8]) {
        self.flags.header_folding = true;
        if line[0] != b'\t' && line[0] != b' ' {
            self.flags.invalid_header_folding = true;
        }
        if self.part_mut().last_header_name.is_empty() {
            self.fail("Multipart: Invalid part header (folding error).");
            return;
        }
        let mut d = 0;
        while is_space(at(line, d)) {
            if line[d] != b'\t' && line[d] != b' ' {
                self.flags.invalid_header_folding = true;
            }
            d += 1;
        }
        let mut more = line[d..].to_vec();
        chomp(&mut more);
        let part = self.part_mut();
        let name = part.last_header_name.clone();
        let value = part.header(&name).expect("the last header is kept");
        value.push(b' ');
        value.extend_from_slice(&more);
        if value.len() > BUF_SIZE {
            self.fail("Multipart: Part header too long.");
            return;
        }
        part.last_header_line = [&name[..], b": ", &value[..]].concat();
    }

    /// The empty line after a part's headers: its Content-Disposition decides its name and
    /// whether it is a file, and its data begins (unless that fails).
    fn headers_end(&mut self) {
        let part = self.part_mut();
        part.end_header_line();
        let Some(cd) = part.header(b"Content-Disposition").cloned() else {
            self.fail("Multipart: Part missing Content-Disposition header.");
            return;
        };
        if let Err(rc) = self.content_disposition(&cd) {
            let head = format!("Multipart: Invalid Content-Disposition header ({rc}): ");
            self.fail([head.as_bytes(), &cd].concat());
            return;
        }
        let part = self.part_mut();
        if part.name.is_empty() {
            self.fail("Multipart: Content-Disposition header missing name field.");
            return;
        }
        if !part.filename.is_empty() {
            // A crude parser could have missed the file: refuse what only a careful one sees.
            if !cd.windows(9).any(|w| w == b"filename=") {
                self.fail("Multipart: Invalid Content-Disposition header (filename).");
                return;
            }
            part.is_file = true;
        }
        part.last_header_name.clear();
        self.in_data = true;
        self.data_read = false;
    }

    /// `parse_content_disposition`: Err with its negative code.
    fn content_disposition(&mut self, v: &[u8]) -> Result<(), i32> {
        if !v.starts_with(b"form-data") {
            return Err(-1);
        }
        let mut p = skip_blanks(v, 9);
        if at(v, p) == 0 {
            return Ok(());
        }
        if at(v, p) != b';' {
            return Err(-2);
        }
        p += 1;
        let mut filename_star = Vec::new();
        while at(v, p) != 0 {
            p = skip_blanks(v, p);
            if at(v, p) == 0 {
                return Err(-3);
            }
            let start = p;
            while !matches!(at(v, p), 0 | b'=' | b'\t' | b' ') {
                p += 1;
            }
            if at(v, p) == 0 {
                return Err(-4);
            }
            let name = &v[start..p];
            p = skip_blanks(v, p);
            match at(v, p) {
                0 => return Err(-5),
                b'=' => {}
                _ => return Err(-13),
            }
            p = skip_blanks(v, p + 1);
            if at(v, p) == 0 {
                return Err(-6);
            }
            let (value, quote, end) = self.parameter_value(v, p, name == b"filename*")?;
            p = end;
            self.parameter(name, value, quote, &mut filename_star)?;
            if at(v, p) != 0 {
                p = skip_blanks(v, p);
                if at(v, p) != 0 {
                    if at(v, p) != b';' {
                        if matches!(v[p - 1], b'\'' | b'"') {
                            self.flags.invalid_quoting = true;
                        }
                        return Err(-12);
                    }
                    p += 1;
                }
            }
        }
        if !filename_star.is_empty() && self.part_mut().filename.is_empty() {
            return Err(-21);
        }
        Ok(())
    }

    /// A parameter's value from `p`: the value, its quote (0 if none) and where it ends.
    fn parameter_value(
        &mut self,
        v: &[u8],
        mut p: usize,
        star: bool,
    ) -> Result<(Vec<u8>, u8, usize), i32> {
        if star {
            return extended_value(v, p).map(|(value, end)| (value, 0, end));
        }
        let quote = at(v, p);
        if quote != b'"' && quote != b'\'' {
            let start = p;
            while at(v, p) != 0 && is_token_char(at(v, p)) {
                p += 1;
            }
            return Ok((v[start..p].to_vec(), 0, p));
        }
        if quote == b'\'' {
            self.flags.invalid_quoting = true;
        }
        p += 1;
        if at(v, p) == 0 {
            return Err(-7);
        }
        let mut value = Vec::new();
        while at(v, p) != 0 {
            if at(v, p) == b'\\' {
                match at(v, p + 1) {
                    0 => return Err(-8),
                    // Only the quote and `\` are escapes; any other `\` is kept (IE).
                    c if c == quote || c == b'\\' => p += 1,
                    _ => {}
                }
            } else if at(v, p) == quote {
                break;
            }
            value.push(at(v, p));
            p += 1;
        }
        if at(v, p) == 0 {
            // Unclosed: 3.0.9 steps over the string's terminator and reads what lies past it
            // (undefined: seen to refuse the header or take the value, by the heap's state).
            // Refused here, as 3.0.9 does whenever that byte is not a NUL, blank or `;`.
            return Err(-12);
        }
        Ok((value, quote, p + 1))
    }

    /// A parameter's meaning: `name`, `filename`, `filename*` (checked, then unused), or an
    /// error for a duplicate or any other name.
    fn parameter(
        &mut self,
        name: &[u8],
        value: Vec<u8>,
        quote: u8,
        filename_star: &mut Vec<u8>,
    ) -> Result<(), i32> {
        match name {
            b"name" | b"filename" => {
                // Single quotes inside a value not in double quotes.
                if quote != b'"' && value.contains(&b'\'') {
                    self.flags.invalid_quoting = true;
                }
                let part = self.part_mut();
                let (slot, dup) = if name == b"name" {
                    (&mut part.name, -14)
                } else {
                    (&mut part.filename, -15)
                };
                if !slot.is_empty() {
                    return Err(dup);
                }
                *slot = value;
            }
            b"filename*" => {
                if !filename_star.is_empty() {
                    return Err(-20);
                }
                *filename_star = value;
            }
            _ => return Err(-11),
        }
        Ok(())
    }

    /// `process_part_data` for the chunk in `buf`: its line ending is held back, the one
    /// held back before is counted (and, for a field, lost).
    pub(super) fn part_data(&mut self) {
        self.data_read = true;
        let mut len = self.buf.len();
        let mut reserved = 0;
        if len >= 1 && self.buf[len - 1] == b'\n' {
            reserved = if len >= 2 && self.buf[len - 2] == b'\r' {
                2
            } else {
                1
            };
            len -= reserved;
        }
        let held = self.reserve;
        let part = self.part.as_mut().expect("a part is being built");
        if part.is_file {
            part.file_size += len + held;
        } else {
            self.no_files_length += (len + held) as u64;
            part.value.extend_from_slice(&self.buf[..len]);
        }
        self.reserve = reserved;
    }

    /// `process_boundary`: the part being built is finished (kept if it has a name, its
    /// header lines recorded either way), and unless `last`, a new one begins.
    pub(super) fn finish_part(&mut self, last: bool) {
        if let Some(mut part) = self.part.take() {
            for line in std::mem::take(&mut part.header_lines) {
                self.part_headers.push((part.name.clone(), line));
            }
            if part.name.is_empty() {
                self.flags.invalid_part = true;
            } else {
                self.parts.push(part);
            }
        }
        if !last {
            self.part = Some(Part::default());
            self.in_data = false;
            self.data_read = false;
            self.reserve = 0;
        }
    }
}

/// Past spaces and tabs from `p`.
fn skip_blanks(v: &[u8], mut p: usize) -> usize {
    while matches!(at(v, p), b'\t' | b' ') {
        p += 1;
    }
    p
}

/// A `filename*` value (`charset'language'pct-encoded`) from `p`, as 3.0.9 checks it: the
/// encoded name undecoded, and where it ends (at a `;` or the end).
fn extended_value(v: &[u8], mut p: usize) -> Result<(Vec<u8>, usize), i32> {
    let charset = p;
    while at(v, p) != 0
        && (at(v, p).is_ascii_alphanumeric() || MIME_CHARSET_SPECIAL.contains(&at(v, p)))
    {
        p += 1;
    }
    if at(v, p) != b'\'' || p == charset {
        return Err(-16);
    }
    p += 1;
    while at(v, p) != 0 && at(v, p) != b'\'' {
        p += 1;
    }
    if at(v, p) != b'\'' {
        return Err(-17);
    }
    p += 1;
    let start = p;
    while at(v, p) != 0 && at(v, p) != b';' {
        let c = at(v, p);
        if c == b'%' {
            if !(at(v, p + 1).is_ascii_hexdigit() && at(v, p + 2).is_ascii_hexdigit()) {
                return Err(-18);
            }
            p += 3;
        } else if c.is_ascii_alphanumeric() || ATTR_CHAR_SPECIAL.contains(&c) {
            p += 1;
        } else {
            return Err(-19);
        }
    }
    Ok((v[start..p].to_vec(), p))
}
