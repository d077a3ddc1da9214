//! Tags, attribute values, the XML declaration and the DOCTYPE's internal subset.

use super::scan::{is_char, normalise_lines, predefined};
use super::{Entity, Fatal, MAX_DEPTH, MAX_NESTING, Parser, Step, Tag};

impl Parser<'_> {
    /// A start tag, its attributes' values kept (namespace declarations are not
    /// attributes; a prefix's binding matters to nothing the rules see, and an undeclared
    /// one is only a namespace error to libxml2). Returns its name and how it ended.
    pub(super) fn start_tag(&mut self, depth: usize) -> Step<(String, Tag)> {
        self.expect("<")?;
        let name = self.name()?;
        if depth > MAX_DEPTH {
            return Err(Fatal);
        }
        let mut attrs: Vec<(String, String)> = Vec::new();
        let mut first = true;
        let tag = loop {
            let blank = self.skip_blanks();
            if self.starts("/>") {
                self.i += 2;
                break Tag::Empty;
            }
            if self.starts(">") {
                self.i += 1;
                break Tag::Open;
            }
            if (blank || first) && self.stops_attributes(first && !blank) {
                break Tag::Cut;
            }
            if !blank {
                return Err(Fatal);
            }
            first = false;
            let key = self.name()?;
            self.skip_blanks();
            self.expect("=")?;
            self.skip_blanks();
            let value = self.att_value()?;
            if attrs.iter().any(|(k, _)| *k == key) {
                return Err(Fatal);
            }
            attrs.push((key, value));
        };
        for (k, v) in attrs {
            if k != "xmlns" && !k.starts_with("xmlns:") {
                self.attrs.push(v.into_bytes());
            }
        }
        Ok((name, tag))
    }

    /// Whether libxml2's loop over a start tag's attributes (`xmlParseStartTag2`) ends here
    /// without an error, where an attribute could start: at a byte outside XML's byte
    /// range (the end of the input, a NUL, a control character). It then makes the element
    /// with the attributes read so far, and the document fails after it. After an attribute
    /// a blank must come first (without one libxml2 fails before making the element); a
    /// NUL right after the name fails while the name is read.
    fn stops_attributes(&self, right_after_name: bool) -> bool {
        match self.s.as_bytes().get(self.i) {
            // An undecodable byte ends the text: libxml2 reads it as an attribute's name.
            None => self.bad_tail.is_none(),
            Some(0) => !right_after_name,
            Some(&b) => b < 0x20,
        }
    }

    /// ETag ::= '</' Name S? '>', the name that of the open element.
    pub(super) fn end_tag(&mut self, open: &str) -> Step {
        self.expect("</")?;
        let name = self.name()?;
        if name != open {
            return Err(Fatal);
        }
        self.skip_blanks();
        self.expect(">")
    }

    /// AttValue, references replaced and blanks made spaces.
    fn att_value(&mut self) -> Step<String> {
        let q = match self.peek() {
            Some(c @ ('"' | '\'')) => c,
            _ => return Err(Fatal),
        };
        self.i += 1;
        let mut out = String::new();
        loop {
            let c = self.peek().ok_or(Fatal)?;
            match c {
                _ if c == q => {
                    self.i += 1;
                    return Ok(out);
                }
                '<' => return Err(Fatal),
                '&' if self.starts("&#") => out.push(self.char_ref()?),
                '&' => {
                    self.i += 1;
                    let name = self.name()?;
                    self.expect(";")?;
                    self.attr_entity(&name, &mut out, 0)?;
                }
                '\r' => {
                    self.i += 1;
                    if self.peek() == Some('\n') {
                        self.i += 1;
                    }
                    out.push(' ');
                }
                '\t' | '\n' => {
                    self.i += 1;
                    out.push(' ');
                }
                _ if !is_char(c) => return Err(Fatal),
                _ => {
                    self.i += c.len_utf8();
                    out.push(c);
                }
            }
        }
    }

    /// An entity referenced in an attribute value: its replacement text as it stands
    /// (libxml2 keeps the reference and resolves it when asked for the value).
    fn attr_entity(&mut self, name: &str, out: &mut String, depth: usize) -> Step {
        if let Some(c) = predefined(name) {
            out.push(char::from(c));
            return Ok(());
        }
        let text = match self.entities.get(name) {
            Some(Entity::Internal(t)) if !t.contains('<') && depth < MAX_NESTING => t.clone(),
            None if self.lenient_entities && !self.standalone => return Ok(()),
            _ => return Err(Fatal),
        };
        self.budget = self.budget.checked_sub(text.len()).ok_or(Fatal)?;
        let mut rest = text.as_str();
        while let Some(at) = rest.find('&') {
            out.push_str(&rest[..at]);
            let Some(end) = rest[at..].find(';') else {
                return Err(Fatal);
            };
            self.attr_entity(&rest[at + 1..at + end], out, depth + 1)?;
            rest = &rest[at + end + 1..];
        }
        out.push_str(rest);
        Ok(())
    }

    /// XMLDecl ::= '<?xml' VersionInfo EncodingDecl? SDDecl? S? '?>'
    pub(super) fn xml_decl(&mut self) -> Step {
        self.i += 5;
        let mut seen_version = false;
        loop {
            let blank = self.skip_blanks();
            if self.starts("?>") {
                self.i += 2;
                return if seen_version { Ok(()) } else { Err(Fatal) };
            }
            if !blank {
                return Err(Fatal);
            }
            let key = self.name()?;
            self.skip_blanks();
            self.expect("=")?;
            self.skip_blanks();
            let value = self.quoted()?;
            match key.as_str() {
                "version" if !seen_version => {
                    // libxml2 refuses what is not `1.` and digits.
                    let digits = value.strip_prefix("1.").ok_or(Fatal)?;
                    if !digits.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(Fatal);
                    }
                    seen_version = true;
                }
                "encoding" if seen_version => {}
                "standalone" if seen_version => match value.as_str() {
                    "yes" => self.standalone = true,
                    "no" => {}
                    _ => return Err(Fatal),
                },
                _ => return Err(Fatal),
            }
        }
    }

    /// A quoted literal, no references read.
    fn quoted(&mut self) -> Step<String> {
        let q = match self.peek() {
            Some(c @ ('"' | '\'')) => c,
            _ => return Err(Fatal),
        };
        self.i += 1;
        let rest = &self.s[self.i..];
        let end = rest.find(q).ok_or(Fatal)?;
        let text = rest[..end].to_string();
        if !text.chars().all(is_char) {
            return Err(Fatal);
        }
        self.i += end + 1;
        Ok(text)
    }

    /// doctypedecl ::= '<!DOCTYPE' S Name (S ExternalID)? S? ('[' intSubset ']' S?)? '>'
    pub(super) fn doctype(&mut self) -> Step {
        self.i += 9;
        if !self.skip_blanks() {
            return Err(Fatal);
        }
        self.name()?;
        self.skip_blanks();
        if self.external_id()? {
            self.lenient_entities = true;
        }
        self.skip_blanks();
        if self.starts("[") {
            self.i += 1;
            self.declarations(false)?;
            self.skip_blanks();
        }
        self.expect(">")
    }

    /// ExternalID ::= 'SYSTEM' S SystemLiteral | 'PUBLIC' S PubidLiteral S SystemLiteral;
    /// whether there was one.
    fn external_id(&mut self) -> Step<bool> {
        if self.starts("SYSTEM") {
            self.i += 6;
        } else if self.starts("PUBLIC") {
            self.i += 6;
            if !self.skip_blanks() {
                return Err(Fatal);
            }
            self.quoted()?;
        } else {
            return Ok(false);
        }
        if !self.skip_blanks() {
            return Err(Fatal);
        }
        self.quoted()?;
        Ok(true)
    }

    /// The internal subset to its `]` (or an internal parameter entity's text to its end:
    /// `nested`): entity declarations kept, other declarations read over.
    fn declarations(&mut self, nested: bool) -> Step {
        loop {
            self.skip_blanks();
            if nested && self.i == self.s.len() {
                return Ok(());
            }
            if !nested && self.starts("]") {
                self.i += 1;
                return Ok(());
            }
            if self.starts("<!--") {
                self.comment()?;
            } else if self.starts("<?") {
                self.pi()?;
            } else if self.starts("<!ENTITY") {
                self.entity_decl()?;
            } else if self.starts("<!ELEMENT")
                || self.starts("<!ATTLIST")
                || self.starts("<!NOTATION")
            {
                self.skip_decl()?;
            } else if self.starts("%") {
                self.pe_reference()?;
            } else {
                return Err(Fatal);
            }
        }
    }

    /// PEReference in the internal subset. libxml2 never loads an external one and then
    /// forgets it saw a reference; after any other, undefined general entities are only a
    /// warning. An internal one's declarations are not read here.
    fn pe_reference(&mut self) -> Step {
        self.i += 1;
        let name = self.name()?;
        self.expect(";")?;
        match self.entities.get(&format!("%{name}")) {
            Some(Entity::External | Entity::Unparsed) => {}
            Some(Entity::Internal(text)) => {
                let text = text.clone();
                self.parameter_text(&text)?;
                self.lenient_entities = true;
            }
            None if self.lenient_entities && !self.standalone => {}
            None => return Err(Fatal),
        }
        Ok(())
    }

    /// An internal parameter entity's replacement text, read as declarations.
    fn parameter_text(&mut self, text: &str) -> Step {
        let mut inner = self.nested(text)?;
        let r = inner.declarations(true);
        self.rejoin(inner);
        r
    }

    /// A declaration read to its `>`, quoted literals skipped whole.
    fn skip_decl(&mut self) -> Step {
        self.i += 2;
        loop {
            match self.peek().ok_or(Fatal)? {
                '>' => {
                    self.i += 1;
                    return Ok(());
                }
                '"' | '\'' => drop(self.quoted()?),
                c => self.i += c.len_utf8(),
            }
        }
    }

    /// EntityDecl: an entity's replacement text (character references expanded) or its
    /// being external; the first declaration of a name binds.
    fn entity_decl(&mut self) -> Step {
        self.i += 8;
        if !self.skip_blanks() {
            return Err(Fatal);
        }
        let parameter = self.starts("%");
        if parameter {
            self.i += 1;
            if !self.skip_blanks() {
                return Err(Fatal);
            }
        }
        let name = self.name()?;
        if !self.skip_blanks() {
            return Err(Fatal);
        }
        let entity = if self.external_id()? {
            if self.skip_decl_tail()? {
                Entity::Unparsed
            } else {
                Entity::External
            }
        } else {
            let value = self.entity_value()?;
            self.skip_blanks();
            self.expect(">")?;
            Entity::Internal(value)
        };
        // Parameter entities share the map under a key no general entity can have.
        let key = if parameter { format!("%{name}") } else { name };
        self.entities.entry(key).or_insert(entity);
        Ok(())
    }

    /// NDataDecl? S? '>': whether there was an `NDATA`.
    fn skip_decl_tail(&mut self) -> Step<bool> {
        let mut unparsed = false;
        if self.skip_blanks() && self.starts("NDATA") {
            self.i += 5;
            self.skip_blanks();
            self.name()?;
            self.skip_blanks();
            unparsed = true;
        }
        self.expect(">")?;
        Ok(unparsed)
    }

    /// EntityValue: character references expanded, entity references kept; a
    /// parameter-entity reference is not allowed in the internal subset (it is in a
    /// parameter entity's text, which this does not expand).
    fn entity_value(&mut self) -> Step<String> {
        let raw = self.quoted()?;
        if raw.contains('%') && self.nesting == 0 {
            return Err(Fatal);
        }
        let raw = normalise_lines(&raw);
        let mut out = String::new();
        let mut rest = raw.as_str();
        while let Some(at) = rest.find("&#") {
            out.push_str(&rest[..at]);
            let mut p = Parser::new(&rest[at..], None);
            out.push(p.char_ref()?);
            rest = &rest[at + p.i..];
        }
        out.push_str(rest);
        Ok(out)
    }
}
