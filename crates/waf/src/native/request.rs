//! A request's variables as libmodsecurity 3.0.9 fills them (`Transaction::processURI`,
//! `addRequestHeader`, `processRequestBody` and its body processors), from what
//! [`crate::inspect`] hands libmodsecurity: the target as the client sent it, the method, the
//! version, the header fields in `HeaderMap` order and the body. The native engine must see
//! the same values, in the same order, for its verdicts to be libmodsecurity's; the
//! differential test (`request/tests.rs`) compares the two variable by variable.
//!
//! Values are bytes: a query string decodes to any byte, and libmodsecurity keeps them so.
//! The response's variables are kept here too (`response.rs`): one transaction's.
//! The evaluator keeps what this does not (TX, MATCHED_*, ...).

mod json;
mod multipart;
mod response;
mod table;
mod xml;

use super::action::BodyProcessor;
use super::ruleset::{LimitAction, Settings};
use super::variable::Var;
use crate::facts::RequestFacts;
use table::Table;

/// What appending the response body decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLimit {
    /// Within the limit, or over it and inspected in part (`ProcessPartial`).
    Kept,
    /// Over the limit with `SecResponseBodyLimitAction Reject`: libmodsecurity decides 403
    /// (with the engine `On`) and keeps none of it; phase 4 still runs, on an empty body.
    Rejected,
}

/// Where an argument came from: ARGS always, ARGS_GET or ARGS_POST by source (a JSON
/// body's arguments go to ARGS alone: libmodsecurity adds them as "JSON").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Get,
    Post,
    Json,
}

/// The body's type as the `Content-Type` header (or `ctl:requestBodyProcessor=URLENCODED`)
/// set it: libmodsecurity's `m_requestBodyType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyType {
    UrlEncoded,
    Multipart,
}

/// The single-valued variables. Each is empty until libmodsecurity would set it, and a
/// rule still reads it then (an `AnchoredVariable` always gives one value).
#[derive(Debug, Clone, Default)]
struct Scalars {
    request_line: Vec<u8>,
    request_method: Vec<u8>,
    request_protocol: Vec<u8>,
    request_uri: Vec<u8>,
    request_uri_raw: Vec<u8>,
    request_filename: Vec<u8>,
    request_basename: Vec<u8>,
    query_string: Vec<u8>,
    remote_addr: Vec<u8>,
    remote_port: Vec<u8>,
    server_addr: Vec<u8>,
    server_port: Vec<u8>,
    unique_id: Vec<u8>,
    request_body: Vec<u8>,
    request_body_length: Vec<u8>,
    args_combined_size: Vec<u8>,
    files_combined_size: Vec<u8>,
    reqbody_processor: Vec<u8>,
    reqbody_error: Vec<u8>,
    reqbody_error_msg: Vec<u8>,
    multipart_strict_error: Vec<u8>,
    multipart_unmatched_boundary: Vec<u8>,
    inbound_data_error: Vec<u8>,
    full_request_length: Vec<u8>,
    response_status: Vec<u8>,
    response_protocol: Vec<u8>,
    response_content_type: Vec<u8>,
    response_content_length: Vec<u8>,
    outbound_data_error: Vec<u8>,
}

/// A request's variables, read once per transaction.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestData {
    s: Scalars,
    args: Table,
    args_get: Table,
    args_post: Table,
    // A collection's *_NAMES reads its keys ([`names_of`]): the same insertions in the
    // same order, so the same order of keys.
    headers: Table,
    cookies: Table,
    files: Table,
    files_sizes: Table,
    part_headers: Table,
    response_headers: Table,
    /// RESPONSE_BODY (kept apart from the scalars: it is the one that can be large).
    response_body_bytes: Vec<u8>,
    /// XML: `("/*", the root element's text)` then `("//@*", value)` per attribute.
    xml: Vec<(Vec<u8>, Vec<u8>)>,
    body_type: Option<BodyType>,
    /// ARGS_COMBINED_SIZE as a number (libmodsecurity keeps a double; sizes stay exact
    /// below 2^53).
    combined: u64,
}

impl RequestData {
    /// Phase 1: what the head gives (REQUEST_LINE, REQUEST_METHOD, REQUEST_PROTOCOL,
    /// REQUEST_URI, REQUEST_URI_RAW, REQUEST_FILENAME, REQUEST_BASENAME, QUERY_STRING,
    /// ARGS_GET (+ names), REQUEST_HEADERS (+ names), REQUEST_COOKIES (+ names),
    /// REMOTE_ADDR, REMOTE_PORT, SERVER_ADDR, SERVER_PORT, UNIQUE_ID, ARGS = ARGS_GET so far,
    /// REQBODY_PROCESSOR by Content-Type).
    pub(crate) fn head(facts: &RequestFacts) -> RequestData {
        let mut d = RequestData::default();
        d.s.remote_addr = facts.client.ip().to_string().into_bytes();
        d.s.remote_port = facts.client.port().to_string().into_bytes();
        d.s.server_addr = facts.server.ip().to_string().into_bytes();
        d.s.server_port = facts.server.port().to_string().into_bytes();
        d.s.unique_id = facts.id.clone().into_bytes();
        d.uri(
            facts.target.as_bytes(),
            facts.method.as_str().as_bytes(),
            facts.version,
        );
        for (name, value) in &facts.headers {
            d.header(name.as_str().as_bytes(), value.as_bytes());
        }
        d
    }

    /// `processURI`: the request line's variables and ARGS_GET.
    fn uri(&mut self, target: &[u8], method: &[u8], version: &str) {
        // A fragment stays only in REQUEST_URI_RAW and REQUEST_LINE.
        let uri = &target[..find(target, b'#').unwrap_or(target.len())];
        let raw_query = find(uri, b'?');
        let decoded = uri_decode(uri);
        self.s.request_method = method.to_vec();
        let mut line = [method, b" ", target].concat();
        self.s.request_protocol = format!("HTTP/{version}").into_bytes();
        line.push(b' ');
        line.extend_from_slice(&self.s.request_protocol);
        self.s.request_line = line;
        // 3.0.9 cuts the decoded target at its first `?`, one that `%3f` made included.
        let path = &decoded[..find(&decoded, b'?').unwrap_or(decoded.len())];
        if let Some(q) = raw_query {
            self.s.query_string = uri[q + 1..].to_vec();
        }
        self.s.request_filename = path.to_vec();
        if let Some(slash) = path.iter().rposition(|&b| b == b'/' || b == b'\\')
            && path.len() > slash + 1
        {
            self.s.request_basename = path[slash + 1..].to_vec();
        }
        self.s.request_uri = without_authority(&decoded).to_vec();
        self.s.request_uri_raw = target.to_vec();
        if !self.s.query_string.is_empty() {
            let query = self.s.query_string.clone();
            self.extract(Source::Get, &query);
        }
    }

    /// `addRequestHeader`: the header, its cookies, and the body type its Content-Type says.
    fn header(&mut self, name: &[u8], value: &[u8]) {
        self.headers.insert(name.to_vec(), value.to_vec());
        if name.eq_ignore_ascii_case(b"cookie") {
            self.cookies(value);
        }
        if name.eq_ignore_ascii_case(b"content-type") {
            let l = value.to_ascii_lowercase();
            if l.starts_with(b"multipart/form-data") {
                self.body_type = Some(BodyType::Multipart);
                self.s.reqbody_processor = b"MULTIPART".to_vec();
            }
            if l.starts_with(b"application/x-www-form-urlencoded") {
                self.body_type = Some(BodyType::UrlEncoded);
                self.s.reqbody_processor = b"URLENCODED".to_vec();
            }
        }
    }

    /// A Cookie header's cookies: split at `;`, the last one's trailing white space and
    /// each name's leading white space dropped, a cookie without `=` a name with an empty
    /// value, one with an empty name skipped; values kept as sent (quotes included).
    fn cookies(&mut self, value: &[u8]) {
        let mut parts = getline_split(value, b';');
        if let Some(last) = parts.last_mut() {
            while last.last().is_some_and(|&b| is_space(b)) {
                *last = &last[..last.len() - 1];
            }
        }
        for c in parts {
            if c.is_empty() {
                continue;
            }
            let (mut key, val) = match find(c, b'=') {
                Some(eq) => (&c[..eq], &c[eq + 1..]),
                None => (c, &c[c.len()..]),
            };
            while key.first().is_some_and(|&b| is_space(b)) {
                key = &key[1..];
            }
            if key.is_empty() {
                continue;
            }
            self.cookies.insert(key.to_vec(), val.to_vec());
        }
    }

    /// `extractArguments`: `buf` split at `&` (an empty piece is an argument with an empty
    /// name, a trailing `&` is not), each at its first `=`, both halves `+`- and
    /// %-decoded (an invalid escape kept as written).
    fn extract(&mut self, source: Source, buf: &[u8]) {
        for piece in getline_split(buf, b'&') {
            let (key, value) = match find(piece, b'=') {
                Some(eq) => (&piece[..eq], &piece[eq + 1..]),
                None => (piece, &piece[piece.len()..]),
            };
            self.argument(source, url_decode(key), url_decode(value));
        }
    }

    /// `addArgument`.
    fn argument(&mut self, source: Source, key: Vec<u8>, value: Vec<u8>) {
        self.combined += (key.len() + value.len()) as u64;
        // `std::to_string` of a double: six decimals.
        self.s.args_combined_size = format!("{}.000000", self.combined).into_bytes();
        match source {
            Source::Get => self.args_get.insert(key.clone(), value.clone()),
            Source::Post => self.args_post.insert(key.clone(), value.clone()),
            Source::Json => {}
        }
        self.args.insert(key, value);
    }

    /// Phase 2: the body through `processor` (None: libmodsecurity's default choice by
    /// Content-Type — urlencoded and multipart; XML and JSON only when a rule's
    /// ctl:requestBodyProcessor asked), within `settings`' limits: REQUEST_BODY,
    /// REQUEST_BODY_LENGTH, ARGS_POST (+ names), ARGS (GET then POST), ARGS_COMBINED_SIZE,
    /// FILES, FILES_NAMES, FILES_SIZES, FILES_COMBINED_SIZE, MULTIPART_PART_HEADERS,
    /// MULTIPART_STRICT_ERROR, MULTIPART_UNMATCHED_BOUNDARY, REQBODY_PROCESSOR,
    /// REQBODY_ERROR, REQBODY_ERROR_MSG, XML, and a JSON body's arguments (in ARGS only,
    /// as libmodsecurity adds them).
    ///
    /// `settings.request_body_access` is taken as this transaction's (after any
    /// `ctl:requestBodyAccess`): without it the processors still run but REQUEST_BODY and
    /// FULL_REQUEST_LENGTH stay empty, as in libmodsecurity (whose phase 2 then does not run).
    /// `Some(Multipart)` acts as a Content-Type of `multipart/form-data` would (3.0.9 has no
    /// `ctl:requestBodyProcessor=MULTIPART`). The no-files limit always applies (libmodsecurity
    /// skips it only when `SecRequestBodyNoFilesLimit` is not configured at all).
    pub(crate) fn body(
        &mut self,
        facts: &RequestFacts,
        processor: Option<BodyProcessor>,
        settings: &Settings,
    ) {
        let body = self.append(&facts.body, settings);
        let structured = match processor {
            Some(BodyProcessor::Xml) => Some(BodyProcessor::Xml),
            Some(BodyProcessor::Json) => Some(BodyProcessor::Json),
            Some(BodyProcessor::UrlEncoded) => {
                self.body_type = Some(BodyType::UrlEncoded);
                None
            }
            Some(BodyProcessor::Multipart) => {
                self.body_type = Some(BodyType::Multipart);
                None
            }
            None => None,
        };
        if let Some(p) = processor {
            self.s.reqbody_processor = processor_name(p).to_vec();
        }
        if self.s.inbound_data_error.is_empty() {
            self.s.inbound_data_error = b"0".to_vec();
        }
        let over = (self.body_type == Some(BodyType::UrlEncoded) || structured.is_some())
            && body.len() as u64 > settings.request_body_no_files_limit;
        if over {
            self.no_files_limit_exceeded();
        }
        match (structured, self.body_type) {
            (Some(BodyProcessor::Xml), _) if !over => self.xml_body(body),
            (Some(BodyProcessor::Json), _) if !over => self.json_body(body),
            (Some(_), _) => {}
            (None, Some(BodyType::Multipart)) => self.multipart_body(body, settings),
            (None, Some(BodyType::UrlEncoded)) => {
                if !over {
                    self.extract(Source::Post, body);
                }
            }
            (None, None) => self.s.reqbody_error = b"0".to_vec(),
        }
        if !settings.request_body_access {
            return;
        }
        let heads: usize = self
            .headers
            .in_insertion_order()
            .map(|(k, v)| k.len() + v.len() + 3)
            .sum();
        self.s.full_request_length = (heads + 2 + body.len()).to_string().into_bytes();
        if !body.is_empty() {
            self.s.request_body = body.to_vec();
            self.s.request_body_length = body.len().to_string().into_bytes();
        }
    }

    /// `appendRequestBody` with the whole body at once: what of it libmodsecurity keeps.
    fn append<'b>(&mut self, body: &'b [u8], settings: &Settings) -> &'b [u8] {
        let limit = settings.request_body_limit;
        if limit == 0 || body.len() as u64 <= limit {
            return body;
        }
        self.s.inbound_data_error = b"1".to_vec();
        match settings.request_body_limit_action {
            LimitAction::ProcessPartial => &body[..usize::try_from(limit).unwrap_or(body.len())],
            // Rejected: nothing is kept (the transaction's intervention answers 403).
            LimitAction::Reject => &[],
        }
    }

    fn no_files_limit_exceeded(&mut self) {
        self.s.reqbody_error = b"1".to_vec();
        self.s.reqbody_error_msg =
            b"Request body excluding files is bigger than the maximum expected.".to_vec();
        self.s.inbound_data_error = b"1".to_vec();
    }

    /// REQBODY_ERROR and its message after a processor ran: `error` is its message.
    fn processed(&mut self, kind: &str, error: Option<String>) {
        match error {
            Some(e) => {
                self.s.reqbody_error = b"1".to_vec();
                self.s.reqbody_error_msg = format!("{kind} parsing error: {e}").into_bytes();
            }
            None => self.s.reqbody_error = b"0".to_vec(),
        }
    }

    fn json_body(&mut self, body: &[u8]) {
        let mut args = Vec::new();
        let error = json::parse(body, &mut args);
        for (k, v) in args {
            self.argument(Source::Json, k, v);
        }
        // An empty body's error (premature EOF) is not one.
        self.processed("JSON", error.filter(|_| !body.is_empty()));
    }

    fn xml_body(&mut self, body: &[u8]) {
        let (values, error) = xml::parse(body);
        self.xml = values;
        self.processed("XML", error);
    }

    fn multipart_body(&mut self, body: &[u8], settings: &Settings) {
        let content_type = self.headers.first(b"Content-Type").map(<[u8]>::to_vec);
        let m = multipart::parse(content_type.as_deref(), body);
        // Set as they are, not through `addArgument`: ARGS_COMBINED_SIZE leaves them out.
        for (name, value) in m.args {
            self.args.insert(name.clone(), value.clone());
            self.args_post.insert(name, value);
        }
        for f in m.files {
            self.files.insert(f.name.clone(), f.filename);
            self.files_sizes
                .insert(f.name.clone(), f.size.to_string().into_bytes());
        }
        for (name, header) in m.part_headers {
            self.part_headers.insert(name, header);
        }
        if let Some(total) = m.files_combined_size {
            self.s.files_combined_size = total.to_string().into_bytes();
        }
        self.s.multipart_strict_error = m.strict_error.to_vec();
        self.s.multipart_unmatched_boundary = m.unmatched_boundary.to_vec();
        match m.error {
            Some(e) => {
                self.s.reqbody_error = b"1".to_vec();
                self.s.reqbody_error_msg = [&b"Multipart parsing error: "[..], &e].concat();
            }
            None if m.no_files_length > settings.request_body_no_files_limit => {
                self.s.reqbody_error = b"1".to_vec();
                self.s.reqbody_error_msg =
                    b"Request body excluding files is bigger than the maximum expected.".to_vec();
                self.s.inbound_data_error = b"1".to_vec();
            }
            None => self.processed("Multipart", None),
        }
    }

    /// Appends `(key, value)` for each of `var`'s values in libmodsecurity's order (for a
    /// scalar: one pair with an empty key; for a *_NAMES collection the value is the key;
    /// for XML the key is the XPath expression, `/*` or `//@*`, the evaluator picks by).
    /// False when `var` is not held here (TX, IP, GLOBAL, MATCHED_*, GEO,
    /// DURATION, HIGHEST_SEVERITY: the evaluator keeps those).
    ///
    /// A `:key` selector takes, in libmodsecurity, that key's values latest first
    /// (`equal_range`), not in this order: see [`RequestData::values_named`].
    pub(crate) fn values<'a>(&'a self, var: Var, mut f: impl FnMut(&'a [u8], &'a [u8])) -> bool {
        if let Some(table) = self.table(var) {
            let names = names_of(var);
            for (k, v) in table.all() {
                f(k, if names { k } else { v });
            }
            return true;
        }
        if var == Var::Xml {
            for (k, v) in &self.xml {
                f(k, v);
            }
            return true;
        }
        match self.scalar(var) {
            Some(v) => {
                f(&[], v);
                true
            }
            None => false,
        }
    }

    /// `ctl:requestBodyProcessor` in phase 1: REQBODY_PROCESSOR says it at once, as in
    /// libmodsecurity (the body is parsed with it in [`RequestData::body`]).
    pub(crate) fn set_processor(&mut self, p: BodyProcessor) {
        self.s.reqbody_processor = processor_name(p).to_vec();
    }

    /// `VAR:key` for a collection: the values whose key is `key` (without regard to case),
    /// in libmodsecurity's order for a key (the latest added first). False as for
    /// [`RequestData::values`], and for a variable that is not a collection held here.
    pub(crate) fn values_named<'a>(
        &'a self,
        var: Var,
        key: &[u8],
        mut f: impl FnMut(&'a [u8], &'a [u8]),
    ) -> bool {
        let Some(table) = self.table(var) else {
            return false;
        };
        let names = names_of(var);
        for (k, v) in table.named(key) {
            f(k, if names { k } else { v });
        }
        true
    }

    /// The table behind a collection (a *_NAMES variable: its collection's).
    fn table(&self, var: Var) -> Option<&Table> {
        Some(match var {
            Var::Args | Var::ArgsNames => &self.args,
            Var::ArgsGet | Var::ArgsGetNames => &self.args_get,
            Var::ArgsPost | Var::ArgsPostNames => &self.args_post,
            Var::RequestHeaders | Var::RequestHeadersNames => &self.headers,
            Var::RequestCookies | Var::RequestCookiesNames => &self.cookies,
            Var::Files | Var::FilesNames => &self.files,
            Var::FilesSizes => &self.files_sizes,
            Var::MultipartPartHeaders => &self.part_headers,
            Var::ResponseHeaders | Var::ResponseHeadersNames => &self.response_headers,
            _ => return None,
        })
    }

    fn scalar(&self, var: Var) -> Option<&[u8]> {
        let s = &self.s;
        Some(match var {
            Var::RequestLine => &s.request_line,
            Var::RequestMethod => &s.request_method,
            Var::RequestProtocol => &s.request_protocol,
            Var::RequestUri => &s.request_uri,
            Var::RequestUriRaw => &s.request_uri_raw,
            Var::RequestFilename => &s.request_filename,
            Var::RequestBasename => &s.request_basename,
            Var::QueryString => &s.query_string,
            Var::RemoteAddr => &s.remote_addr,
            Var::RemotePort => &s.remote_port,
            Var::ServerAddr => &s.server_addr,
            Var::ServerPort => &s.server_port,
            Var::UniqueId => &s.unique_id,
            Var::RequestBody => &s.request_body,
            Var::RequestBodyLength => &s.request_body_length,
            Var::ArgsCombinedSize => &s.args_combined_size,
            Var::FilesCombinedSize => &s.files_combined_size,
            Var::ReqbodyProcessor => &s.reqbody_processor,
            Var::ReqbodyError => &s.reqbody_error,
            Var::ReqbodyErrorMsg => &s.reqbody_error_msg,
            Var::MultipartStrictError => &s.multipart_strict_error,
            Var::MultipartUnmatchedBoundary => &s.multipart_unmatched_boundary,
            Var::InboundDataError => &s.inbound_data_error,
            Var::FullRequestLength => &s.full_request_length,
            Var::ResponseStatus => &s.response_status,
            Var::ResponseProtocol => &s.response_protocol,
            Var::ResponseContentType => &s.response_content_type,
            Var::ResponseContentLength => &s.response_content_length,
            Var::ResponseBody => &self.response_body_bytes,
            Var::OutboundDataError => &s.outbound_data_error,
            _ => return None,
        })
    }
}

/// ARGS_NAMES and its like: the keys of ARGS (and its like) as values.
/// Whether `var` is a collection's keys (read from the collection's table).
fn names_of(var: Var) -> bool {
    matches!(
        var,
        Var::ArgsNames
            | Var::ArgsGetNames
            | Var::ArgsPostNames
            | Var::RequestHeadersNames
            | Var::RequestCookiesNames
            | Var::FilesNames
            | Var::ResponseHeadersNames
    )
}

fn processor_name(p: BodyProcessor) -> &'static [u8] {
    match p {
        BodyProcessor::UrlEncoded => b"URLENCODED",
        BodyProcessor::Multipart => b"MULTIPART",
        BodyProcessor::Xml => b"XML",
        BodyProcessor::Json => b"JSON",
    }
}

fn find(s: &[u8], b: u8) -> Option<usize> {
    s.iter().position(|&c| c == b)
}

/// `isspace` in the C locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `utils::string::ssplit` (`std::getline` in a loop): pieces between `sep`s, with no
/// piece after a trailing `sep` and none at all for an empty string.
fn getline_split(s: &[u8], sep: u8) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = s.split(|&b| b == sep).collect();
    if s.is_empty() || s.last() == Some(&sep) {
        out.pop();
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// `urldecode_nonstrict_inplace`: `+` is a space, `%XX` a byte, any other `%` kept.
fn url_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' if i + 2 < s.len()
                && let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) =>
            {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// `utils::uri_decode`: `%XX` a byte, `+` and any other `%` kept.
fn uri_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%'
            && i + 2 < s.len()
            && let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// REQUEST_URI from the decoded target: for an absolute form (`scheme://host/path`), the
/// path on; anything else whole.
fn without_authority(decoded: &[u8]) -> &[u8] {
    if decoded.is_empty() || decoded[0] == b'/' {
        return decoded;
    }
    let Some(colon) = find(decoded, b':') else {
        return decoded;
    };
    let scheme = colon + 1;
    if decoded[scheme..].starts_with(b"//") {
        let netloc = scheme + 2;
        if let Some(p) = find(&decoded[netloc..], b'/') {
            return &decoded[netloc + p..];
        }
    }
    decoded
}

#[cfg(all(test, feature = "modsecurity"))]
mod tests;
