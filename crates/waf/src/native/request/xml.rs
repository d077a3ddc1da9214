//! An XML body as libmodsecurity 3.0.9 reads it: xml.cc hands the whole body to libxml2
//! 2.9's push parser (default options: no entity substitution, no DTD loading, no network)
//! and keeps the document it built even when it is not well-formed, so the rules still see
//! what was parsed before the first fatal error. `XML:/*` is then the root element's
//! `xmlNodeGetContent` (every text and CDATA descendant, and the replacement text of each
//! internal entity referenced, joined), one value; `XML://@*` is each attribute's value in
//! document order (namespace declarations are not attributes in libxml2).
//!
//! A fatal error gives libmodsecurity's only message, "XML: Failed parsing document."
//! (`request.rs` prefixes "XML parsing error: " as libmodsecurity does). libxml2's
//! non-fatal diagnostics (namespace errors, reserved PI names, undefined entities where a
//! DOCTYPE names an external subset) leave REQBODY_ERROR at 0, as there.
//!
//! The message is exact: libmodsecurity never passes on libxml2's own. What libxml2 had
//! built before failing is followed closely, down to its push parser's habits (content
//! shorter than two bytes at the end is never read; text is handed over in runs, see
//! [`Parser::fail_in_run`]; a start tag cut short after a blank still makes its element;
//! a CDATA section's line ends are kept; an entity's content is all or nothing); the
//! differential in `xml/tests.rs` pins these down.
//!
//! A declared encoding libxml2 has no converter of its own for is converted through glibc's
//! iconv from the byte after the declaration's closing quote, as libxml2 converts it
//! (`iconv.rs`); one iconv does not know is refused (libxml2 would then ask ICU).
//!
//! Where this is not libxml2 (each rare in requests; `KNOWN` in the tests lists bodies):
//! encodings only ICU knows are refused, and so is a body whose first four bytes are `<?xm`
//! in EBCDIC (libxml2 converts it); entity
//! amplification is refused past a fixed budget and nesting depth rather than libxml2's
//! ratio; parameter-entity references inside a parameter entity's text are not expanded;
//! an unterminated CDATA section keeps none of its text (libxml2 hands over 300-byte
//! blocks of it). UTF-16 and UCS-4, their detection by the first four bytes and their
//! converters' failures are libxml2's (`decode.rs`).

mod decode;
mod iconv;
mod markup;
mod scan;
#[cfg(all(test, feature = "modsecurity"))]
mod tests;

use std::collections::HashMap;

/// `(XPath, value)` pairs.
pub(super) type Values = Vec<(Vec<u8>, Vec<u8>)>;

/// The message libmodsecurity gives for any document libxml2 finds not well-formed.
const FAILED: &str = "XML: Failed parsing document.";

/// libxml2's `xmlParserMaxDepth` without `XML_PARSE_HUGE`.
const MAX_DEPTH: usize = 256;

/// Bytes of entity replacement text one document may expand to (billion laughs).
const ENTITY_BUDGET: usize = 1 << 20;

/// Entities expanded within one another at most (libxml2 finds loops; this bounds them).
const MAX_NESTING: usize = 40;

/// The values for `XML:/*` and `XML://@*` (keys `/*` and `//@*`), and the parse error (as
/// libmodsecurity writes it after "XML parsing error: "), if any.
pub(super) fn parse(body: &[u8]) -> (Values, Option<String>) {
    let (text, bad_tail) = match decode::decode(body) {
        decode::Decoded::Text(text, bad_tail) => (text, bad_tail),
        decode::Decoded::Refused => return (Vec::new(), Some(FAILED.to_string())),
        decode::Decoded::Halted => return (Vec::new(), None),
    };
    let mut p = Parser::new(&text, bad_tail);
    let ok = p.document().is_ok();
    let mut values = Vec::new();
    if let Some(root) = p.root {
        values.push((b"/*".to_vec(), root));
    }
    values.extend(p.attrs.into_iter().map(|a| (b"//@*".to_vec(), a)));
    (values, (!ok).then(|| FAILED.to_string()))
}

/// A fatal error: libxml2 stops building the document (`disableSAX`).
struct Fatal;

type Step<T = ()> = Result<T, Fatal>;

/// How a start tag ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tag {
    /// `>`: content follows.
    Open,
    /// `/>`.
    Empty,
    /// Cut short where an attribute could start (`markup.rs`'s `stops_attributes`): libxml2
    /// made the element, then failed.
    Cut,
}

/// An entity declared in the internal subset.
enum Entity {
    /// Replacement text, character references already expanded.
    Internal(String),
    External,
    /// An external entity with a notation (`NDATA`): referencing it in content or in an
    /// attribute value is a fatal error (libxml2's `XML_ERR_UNPARSED_ENTITY`).
    Unparsed,
}

/// A recursive-descent reader of one document, keeping what libxml2's tree would hold.
struct Parser<'a> {
    s: &'a str,
    i: usize,
    /// When an undecodable byte ends `s`: how many bytes of the body it and what follows
    /// it are.
    bad_tail: Option<usize>,
    /// The root element's text content so far, once its start tag was read.
    root: Option<Vec<u8>>,
    /// Every attribute's value so far, in document order.
    attrs: Vec<Vec<u8>>,
    /// General entities by name, parameter entities by `%name`.
    entities: HashMap<String, Entity>,
    /// A DOCTYPE with an external subset or parameter-entity references: undefined
    /// entities are then only a warning.
    lenient_entities: bool,
    /// `standalone='yes'`: undefined entities are fatal whatever the DOCTYPE says.
    standalone: bool,
    /// Entity replacement bytes this document may still expand.
    budget: usize,
    /// Entities being expanded around this text (bounds a reference loop).
    nesting: usize,
}

impl<'a> Parser<'a> {
    fn new(s: &'a str, bad_tail: Option<usize>) -> Self {
        Parser {
            s,
            i: 0,
            bad_tail,
            root: None,
            attrs: Vec::new(),
            entities: HashMap::new(),
            lenient_entities: false,
            standalone: false,
            budget: ENTITY_BUDGET,
            nesting: 0,
        }
    }

    /// A reader of an entity's replacement text sharing this one's entities and budget;
    /// hand it back with [`Parser::rejoin`].
    fn nested<'t>(&mut self, text: &'t str) -> Step<Parser<'t>> {
        if self.nesting >= MAX_NESTING {
            return Err(Fatal);
        }
        self.budget = self.budget.checked_sub(text.len()).ok_or(Fatal)?;
        let mut inner = Parser::new(text, None);
        inner.entities = std::mem::take(&mut self.entities);
        inner.lenient_entities = self.lenient_entities;
        inner.standalone = self.standalone;
        inner.budget = self.budget;
        inner.nesting = self.nesting + 1;
        Ok(inner)
    }

    fn rejoin(&mut self, inner: Parser<'_>) {
        self.entities = inner.entities;
        self.lenient_entities = inner.lenient_entities;
        self.budget = inner.budget;
    }

    /// document ::= XMLDecl? Misc* (doctypedecl Misc*)? element Misc*
    fn document(&mut self) -> Step {
        if self.s.is_empty() {
            return Err(Fatal);
        }
        if self.starts("<?xml") && self.at_blank(5) {
            self.xml_decl()?;
        }
        self.misc()?;
        if self.starts("<!DOCTYPE") {
            self.doctype()?;
            self.misc()?;
        }
        if !self.starts("<") || self.starts("<!") || self.starts("<?") {
            return Err(Fatal);
        }
        self.root_element()?;
        self.misc()?;
        if self.i < self.s.len() || self.bad_tail.is_some() {
            return Err(Fatal);
        }
        Ok(())
    }

    /// Misc ::= Comment | PI | S
    fn misc(&mut self) -> Step {
        loop {
            self.skip_blanks();
            if self.starts("<!--") {
                self.comment()?;
            } else if self.starts("<?") {
                self.pi()?;
            } else {
                return Ok(());
            }
        }
    }

    /// The root element and all it holds, with an explicit stack of open names.
    fn root_element(&mut self) -> Step {
        let mut open: Vec<String> = Vec::new();
        loop {
            let (name, tag) = self.start_tag(open.len())?;
            self.root.get_or_insert_with(Vec::new);
            match tag {
                Tag::Open => open.push(name),
                Tag::Empty => {}
                Tag::Cut => return Err(Fatal),
            }
            while let Some(name) = open.last() {
                let mut text = Vec::new();
                let end = self.content(&mut text, false);
                self.root
                    .get_or_insert_with(Vec::new)
                    .extend_from_slice(&text);
                end?;
                if !self.starts("</") {
                    break; // a start tag
                }
                self.end_tag(name)?;
                open.pop();
            }
            if open.is_empty() {
                return Ok(());
            }
        }
    }
}
