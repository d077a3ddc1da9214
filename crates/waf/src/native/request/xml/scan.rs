//! Characters, names, and the content between tags: text, references, CDATA sections,
//! comments and processing instructions.

use super::{Entity, Fatal, Parser, Step, Tag};

/// libxml2's `XML_PARSER_BIG_BUFFER_SIZE`: text it buffers is handed over in such steps.
const BUFFER: usize = 300;

/// XML 1.0's Char.
pub(super) fn is_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
}

fn is_name_start(c: char) -> bool {
    matches!(c, ':' | 'A'..='Z' | '_' | 'a'..='z' | '\u{c0}'..='\u{d6}' | '\u{d8}'..='\u{f6}'
        | '\u{f8}'..='\u{2ff}' | '\u{370}'..='\u{37d}' | '\u{37f}'..='\u{1fff}'
        | '\u{200c}'..='\u{200d}' | '\u{2070}'..='\u{218f}' | '\u{2c00}'..='\u{2fef}'
        | '\u{3001}'..='\u{d7ff}' | '\u{f900}'..='\u{fdcf}' | '\u{fdf0}'..='\u{fffd}'
        | '\u{10000}'..='\u{effff}')
}

fn is_name_char(c: char) -> bool {
    is_name_start(c)
        || matches!(c, '-' | '.' | '0'..='9' | '\u{b7}' | '\u{300}'..='\u{36f}' | '\u{203f}'..='\u{2040}')
}

impl Parser<'_> {
    pub(super) fn starts(&self, p: &str) -> bool {
        self.s[self.i..].starts_with(p)
    }

    pub(super) fn peek(&self) -> Option<char> {
        self.s[self.i..].chars().next()
    }

    /// Whether the character `n` bytes on is a blank.
    pub(super) fn at_blank(&self, n: usize) -> bool {
        matches!(
            self.s.as_bytes().get(self.i + n),
            Some(b' ' | b'\t' | b'\r' | b'\n')
        )
    }

    /// Skips blanks; whether there were any.
    pub(super) fn skip_blanks(&mut self) -> bool {
        let start = self.i;
        while self.at_blank(0) {
            self.i += 1;
        }
        self.i > start
    }

    pub(super) fn expect(&mut self, p: &str) -> Step {
        if !self.starts(p) {
            return Err(Fatal);
        }
        self.i += p.len();
        Ok(())
    }

    /// Name ::= NameStartChar (NameChar)*
    pub(super) fn name(&mut self) -> Step<String> {
        let rest = &self.s[self.i..];
        match rest.chars().next() {
            Some(c) if is_name_start(c) => {}
            _ => return Err(Fatal),
        }
        let len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        self.i += len;
        Ok(rest[..len].to_string())
    }

    /// Text up to `end` (consumed), every character checked, line ends normalised.
    fn until(&mut self, end: &str) -> Step<String> {
        self.until_raw(end).map(normalise_lines)
    }

    /// Text up to `end` (consumed), every character checked, as written.
    fn until_raw(&mut self, end: &str) -> Step<&str> {
        let rest = &self.s[self.i..];
        let Some(at) = rest.find(end) else {
            return Err(Fatal);
        };
        let text = &rest[..at];
        if !text.chars().all(is_char) {
            return Err(Fatal);
        }
        self.i += at + end.len();
        Ok(text)
    }

    /// Comment ::= '<!--' ((Char - '-') | ('-' (Char - '-')))* '-->'
    pub(super) fn comment(&mut self) -> Step {
        self.expect("<!--")?;
        self.until("--")?;
        self.expect(">")
    }

    /// PI ::= '<?' PITarget (S (Char* - (Char* '?>' Char*)))? '?>'
    pub(super) fn pi(&mut self) -> Step {
        self.expect("<?")?;
        let target = self.name()?;
        if target.eq_ignore_ascii_case("xml") {
            return Err(Fatal);
        }
        if self.starts("?>") {
            self.i += 2;
            return Ok(());
        }
        if !self.skip_blanks() {
            return Err(Fatal);
        }
        self.until("?>").map(drop)
    }

    /// Content up to the next tag (not consumed) into `out`: text, references, CDATA, and
    /// (skipped) comments and PIs. In an entity's replacement text (`nested`) the end of
    /// the text ends it. On a fatal error, keeps in `out` what libxml2 had delivered.
    pub(super) fn content(&mut self, out: &mut Vec<u8>, nested: bool) -> Step {
        let mut run = Run::default();
        let r = self.content_runs(out, &mut run, nested);
        if r.is_err() {
            self.fail_in_run(out, &run);
        }
        r
    }

    fn content_runs(&mut self, out: &mut Vec<u8>, run: &mut Run, nested: bool) -> Step {
        let mut start = self.i;
        loop {
            if run.text.is_empty() {
                start = self.i;
            }
            let rest = &self.s[self.i..];
            let stop = rest.find(['<', '&', ']', '\r']).unwrap_or(rest.len());
            let text = &rest[..stop];
            if let Some(bad) = text.find(|c: char| !is_char(c)) {
                run.text.push_str(&text[..bad]);
                self.i += bad;
                return Err(Fatal);
            }
            run.text.push_str(text);
            self.i += stop;
            let Some(c) = self.peek() else {
                if nested {
                    flush(out, run);
                    return Ok(());
                }
                if self.s.len() - start < 2 && self.bad_tail.is_none() {
                    // libxml2's push parser leaves content shorter than two bytes unread.
                    run.clear();
                }
                return Err(Fatal);
            };
            match c {
                '\r' => {
                    self.i += 1;
                    let crlf = self.peek() == Some('\n');
                    if crlf {
                        self.i += 1;
                    }
                    // libxml2's fast path ends at a lone CR; it takes a CRLF, but goes on
                    // after it only to ASCII text, a tab or a LF (its loop's test), so
                    // anything else leaves the LF to the buffered path.
                    let on = matches!(
                        self.s.as_bytes().get(self.i),
                        Some(0x20..=0x7f | b'\t' | b'\n')
                    );
                    if crlf {
                        // The fast path hands over the text before a CRLF's CR.
                        run.handed_over = run.text.len();
                    }
                    if !crlf || !on {
                        run.fast_end.get_or_insert(run.text.len());
                    }
                    run.text.push('\n');
                }
                ']' if self.starts("]]>") => {
                    run.cdata_end = true;
                    return Err(Fatal);
                }
                ']' => {
                    run.text.push(']');
                    self.i += 1;
                }
                '&' => {
                    flush(out, run);
                    self.reference(out)?;
                }
                _ => {
                    flush(out, run);
                    if !self.markup_in_content(out)? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// At `<`: a comment, PI or CDATA section is read (true); a tag is left (false).
    fn markup_in_content(&mut self, out: &mut Vec<u8>) -> Step<bool> {
        if self.starts("<!--") {
            self.comment()?;
        } else if self.starts("<![CDATA[") {
            self.i += 9;
            // libxml2's push parser hands a CDATA section's bytes over as they came: its
            // line ends are not normalised.
            let text = self.until_raw("]]>")?;
            out.extend_from_slice(text.as_bytes());
        } else if self.starts("<?") {
            self.pi()?;
        } else if self.starts("<!") {
            return Err(Fatal);
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    /// What of the text run in progress libxml2 had delivered when it failed: its fast
    /// path hands over the ASCII text before the first other character or lone CR (it
    /// takes a CRLF followed by ASCII text) at once; the rest goes through a buffer handed
    /// over each time it holds 300 bytes or more, whose last part is lost when the failure
    /// is found while reading a character (a NUL, an undecodable byte, a multi-byte
    /// character not allowed such as U+FFFE; unless fewer than four bytes are left from
    /// that byte: libxml2 takes it for a character cut short, ends the text there and fails
    /// later). A `]]>` in the text (`cdata_end`) fails at once, the fast path handing over
    /// nothing since its last CRLF, the buffered path losing its buffer.
    pub(super) fn fail_in_run(&self, out: &mut Vec<u8>, run: &Run) {
        let (text, lone_cr) = (&run.text, run.fast_end);
        let at_bad = self.i == self.s.len() && self.bad_tail.is_some_and(|t| t >= 4);
        // libxml2's `xmlCurrentChar` fails on a NUL or a multi-byte character not allowed
        // while reading it too, before the buffer is handed over (on an ASCII one, such as
        // \x01, its caller fails after).
        let unreadable = self.s[self.i..]
            .chars()
            .next()
            .is_some_and(|c| c == '\0' || (!c.is_ascii() && !is_char(c)));
        if !at_bad && !unreadable && !run.cdata_end {
            out.extend_from_slice(text.as_bytes());
            return;
        }
        let non_ascii = text.find(|c: char| !c.is_ascii()).unwrap_or(text.len());
        let ascii = lone_cr.map_or(non_ascii, |cr| cr.min(non_ascii));
        if run.cdata_end && ascii == text.len() {
            out.extend_from_slice(&text.as_bytes()[..run.handed_over]);
            return;
        }
        let run = text;
        let mut kept = ascii;
        let mut buffered = 0;
        for (at, c) in run[ascii..].char_indices() {
            buffered += c.len_utf8();
            if buffered >= BUFFER {
                kept = ascii + at + c.len_utf8();
                buffered = 0;
            }
        }
        out.extend_from_slice(&run.as_bytes()[..kept]);
    }

    /// A reference in content: a character, a predefined entity, or a declared one (its
    /// replacement text read as content). An undefined entity is fatal unless a DOCTYPE
    /// makes it a warning.
    fn reference(&mut self, out: &mut Vec<u8>) -> Step {
        if self.starts("&#") {
            let c = self.char_ref()?;
            let mut b = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            return Ok(());
        }
        self.i += 1;
        let name = self.name()?;
        self.expect(";")?;
        if let Some(c) = predefined(&name) {
            out.push(c);
            return Ok(());
        }
        match self.entities.get(&name) {
            Some(Entity::Internal(text)) => {
                // libxml2 parses the text into a node list first and drops it on failure.
                let text = text.clone();
                let mut content = Vec::new();
                self.expand(&text, &mut content)?;
                out.extend_from_slice(&content);
                Ok(())
            }
            Some(Entity::External) => Ok(()),
            Some(Entity::Unparsed) => Err(Fatal),
            None if self.lenient_entities && !self.standalone => Ok(()),
            None => Err(Fatal),
        }
    }

    /// An internal entity's replacement text, parsed as balanced content into `out`.
    fn expand(&mut self, text: &str, out: &mut Vec<u8>) -> Step {
        let mut inner = self.nested(text)?;
        let r = inner.balanced(out);
        self.rejoin(inner);
        r
    }

    /// Content with elements, to the end of the text, every tag closed.
    fn balanced(&mut self, out: &mut Vec<u8>) -> Step {
        let mut open: Vec<String> = Vec::new();
        loop {
            let mut text = Vec::new();
            let r = self.content(&mut text, true);
            out.extend_from_slice(&text);
            r?;
            if self.i == self.s.len() {
                return if open.is_empty() { Ok(()) } else { Err(Fatal) };
            }
            if self.starts("</") {
                let name = open.pop().ok_or(Fatal)?;
                self.end_tag(&name)?;
                continue;
            }
            let attrs = self.attrs.len();
            let tag = self.start_tag(open.len());
            self.attrs.truncate(attrs);
            match tag? {
                (name, Tag::Open) => open.push(name),
                (_, Tag::Empty) => {}
                (_, Tag::Cut) => return Err(Fatal),
            }
        }
    }

    /// CharRef ::= '&#' [0-9]+ ';' | '&#x' [0-9a-fA-F]+ ';' (a Char).
    pub(super) fn char_ref(&mut self) -> Step<char> {
        self.expect("&#")?;
        let hex = self.starts("x");
        if hex {
            self.i += 1;
        }
        let rest = &self.s[self.i..];
        let len = rest
            .find(|c: char| {
                !(if hex {
                    c.is_ascii_hexdigit()
                } else {
                    c.is_ascii_digit()
                })
            })
            .unwrap_or(rest.len());
        let value = u32::from_str_radix(&rest[..len], if hex { 16 } else { 10 });
        self.i += len;
        self.expect(";")?;
        value
            .ok()
            .and_then(char::from_u32)
            .filter(|c| is_char(*c))
            .ok_or(Fatal)
    }
}

/// The byte a predefined entity stands for.
pub(super) fn predefined(name: &str) -> Option<u8> {
    Some(match name {
        "lt" => b'<',
        "gt" => b'>',
        "amp" => b'&',
        "apos" => b'\'',
        "quot" => b'"',
        _ => return None,
    })
}

/// Moves a finished text run into `out`.
fn flush(out: &mut Vec<u8>, run: &mut Run) {
    out.extend_from_slice(run.text.as_bytes());
    run.clear();
}

/// A text run in progress (up to the next `<` or `&`, which libxml2 parses as one), and
/// where libxml2's ASCII fast path over it ended at a lone CR, if it did
/// ([`Parser::fail_in_run`]).
#[derive(Debug, Default)]
pub(super) struct Run {
    text: String,
    fast_end: Option<usize>,
    /// How much of `text` the fast path handed over at CRLFs.
    handed_over: usize,
    /// Whether a `]]>` ended it.
    cdata_end: bool,
}

impl Run {
    fn clear(&mut self) {
        self.text.clear();
        self.fast_end = None;
        self.handed_over = 0;
        self.cdata_end = false;
    }
}

/// `\r\n` and a lone `\r` read as `\n`, as libxml2's input does.
pub(super) fn normalise_lines(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\r', "\n")
}
