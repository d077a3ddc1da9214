//! An XML body as libmodsecurity 3.0.9 reads it (xml.cc, libxml2): `XML:/*` is the root
//! element's text content (`xmlNodeGetContent`: every text and CDATA descendant, joined),
//! one value; `XML://@*` is each attribute's value, in document order.
//!
//! Not built yet: [`parse`] gives no values and no error, so an XML body gives no XML
//! values and REQBODY_ERROR is "0". No XML parser is in Cargo.lock: the real one is to be a
//! small tokenizer for these two paths.

/// `(XPath, value)` pairs.
pub(super) type Values = Vec<(Vec<u8>, Vec<u8>)>;

/// The values for `XML:/*` and `XML://@*` (keys `/*` and `//@*`), and the parse error (as
/// libmodsecurity writes it after "XML parsing error: "), if any.
pub(super) fn parse(_body: &[u8]) -> (Values, Option<String>) {
    (Vec::new(), None)
}
