//! The multipart differential: bodies through libmodsecurity 3.0.9 and through
//! [`super::parse`] (by way of `RequestData`), every request variable compared, with the
//! harness of `request/tests.rs`. The hand-picked bodies raise each flag MULTIPART_STRICT_ERROR
//! combines and take each error path of `multipart.cc`; the CRS regression tests' multipart
//! requests add what clients and attackers send.

use crate::native::request::tests::{Case, case, compare, crs_labelled_inputs};

const B: &str = "XyZ";

fn ct(value: &str) -> String {
    format!("multipart/form-data; boundary={value}")
}

/// A POST of `body` with Content-Type `content_type`.
fn post(label: &str, content_type: &str, body: &[u8]) -> Case {
    let headers: &[(&str, &[u8])] = &[("host", b"h"), ("content-type", content_type.as_bytes())];
    case(label, "POST", "/up?g=1", headers, body)
}

/// A body of parts, each `(headers, data)`, with CRLF lines and boundary [`B`].
fn body(parts: &[(&str, &[u8])], end: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for (headers, data) in parts {
        out.extend_from_slice(format!("--{B}\r\n{headers}\r\n\r\n").as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(end.as_bytes());
    out
}

fn field(name: &str) -> String {
    format!("Content-Disposition: form-data; name=\"{name}\"")
}

fn file(name: &str, filename: &str) -> String {
    format!(
        "Content-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n\
         Content-Type: text/plain"
    )
}

/// Bodies with boundary [`B`] and one field "a": line endings, the ends of the body,
/// lines that look like boundaries.
fn ending_cases() -> Vec<Case> {
    let a = field("a");
    let one = |end: &str| body(&[(&a, b"1")], end);
    let simple = body(
        &[(&a, b"1"), (&file("up", "x.txt"), b"l1\r\nl2\n")],
        &format!("--{B}--\r\n"),
    );
    let lf = String::from_utf8(simple.clone())
        .unwrap()
        .replace("\r\n", "\n");
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("simple", simple.clone()),
        ("LF lines", lf.into_bytes()),
        (
            "mixed endings",
            format!("--{B}\n{a}\r\n\r\n1\r\n--{B}--\r\n").into(),
        ),
        (
            "LF before the final boundary",
            format!("--{B}\r\n{a}\r\n\r\n1\n--{B}--\r\n").into(),
        ),
        ("no final boundary", one("")),
        ("final boundary unended", one(&format!("--{B}--"))),
        (
            "final boundary unended after LF",
            format!("--{B}\r\n{a}\r\n\r\n1\n--{B}--").into(),
        ),
        (
            "final boundary unended, no data",
            format!("--{B}\r\n{a}\r\n\r\n--{B}--").into(),
        ),
        ("final boundary LF", one(&format!("--{B}--\n"))),
        ("final boundary CR", one(&format!("--{B}--\r"))),
        ("blank after final", one(&format!("--{B}-- \r\n"))),
        (
            "blank after boundary",
            one(&format!("--{B} \r\n{a}\r\n\r\n2\r\n--{B}--\r\n")),
        ),
        ("just the final boundary", format!("--{B}--\r\n").into()),
        (
            "final boundary first",
            [format!("--{B}--\r\n").as_bytes(), &simple].concat(),
        ),
        (
            "data before",
            [b"preamble\r\n".as_slice(), &simple].concat(),
        ),
        ("long preamble", [vec![b'p'; 5000], simple.clone()].concat()),
        ("data after", [simple.as_slice(), b"epilogue"].concat()),
        ("data after, a line", [simple.as_slice(), b"\r\n"].concat()),
        ("empty body", Vec::new()),
        ("no boundary in payload", b"hello\r\nworld\r\n".to_vec()),
        (
            "unmatched boundary",
            one(&format!("--other\r\ntext --{B} inside\r\n--{B}--\r\n")),
        ),
        (
            "data mentions boundary",
            body(&[(&a, b"a --XyZ b")], &format!("--{B}--\r\n")),
        ),
        (
            "boundary with suffix",
            one(&format!("--{B}abc\r\n--{B}--\r\n")),
        ),
        (
            "boundary with white space",
            one(&format!("-- {B}\r\n--{B}--\r\n")),
        ),
        (
            "boundary quoted in body",
            one(&format!("--\"{B}\"\r\n--{B}--\r\n")),
        ),
        (
            "dashes only",
            one(&format!("---\r\n----\r\n--\r\n--{B}--\r\n")),
        ),
    ];
    let f = |(label, b): &(&str, Vec<u8>)| post(label, &ct(B), b);
    bodies.iter().map(f).collect()
}

/// Bodies with boundary [`B`]: parts and their data.
fn part_cases() -> Vec<Case> {
    let end = format!("--{B}--\r\n");
    let (a, b, c) = (field("a"), field("b"), file("up", "x.txt"));
    let many: Vec<(String, Vec<u8>)> = (0..30)
        .map(|i| (field(&format!("k{}", i % 13)), format!("v{i}").into_bytes()))
        .chain((0..14).map(|i| {
            (
                file(&format!("f{}", i % 5), &format!("n{i}")),
                vec![b'd'; i],
            )
        }))
        .collect();
    let many: Vec<(&str, &[u8])> = many.iter().map(|(h, d)| (h.as_str(), &d[..])).collect();
    let long = vec![b'x'; 5000];
    let mut cr_at_edge = vec![b'y'; 4095];
    cr_at_edge.extend_from_slice(b"\r\nz");
    let dup = [
        (&a, &b"1"[..]),
        (&a, b"2"),
        (&file("a", "f"), b"3"),
        (&file("a", "g"), b""),
    ];
    let dup: Vec<(&str, &[u8])> = dup.iter().map(|(h, d)| (h.as_str(), *d)).collect();
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("many parts", body(&many, &end)),
        ("duplicate names", body(&dup, &end)),
        (
            "empty part",
            format!("--{B}\r\n--{B}\r\n{a}\r\n\r\n1\r\n{end}").into(),
        ),
        (
            "part without data",
            format!("--{B}\r\n{a}\r\n\r\n--{B}\r\n{b}\r\n\r\n2\r\n{end}").into(),
        ),
        (
            "boundary where data begins",
            format!("--{B}\r\n--{B}\r\n--{B}\r\n{a}\r\n\r\n1\r\n{end}").into(),
        ),
        ("empty value", body(&[(&a, b""), (&b, b"\r\n")], &end)),
        (
            "multi-line value",
            body(&[(&a, b"l1\r\nl2\nl3\rl4\r\n\r\n")], &end),
        ),
        (
            "multi-line file",
            body(
                &[(&c, b"l1\r\nl2\nl3\r\n\r\n"), (&file("e", "empty"), b"")],
                &end,
            ),
        ),
        ("long lines", body(&[(&a, &long), (&c, &long)], &end)),
        (
            "CR at the buffer's edge",
            body(&[(&a, &cr_at_edge), (&c, &cr_at_edge)], &end),
        ),
        ("NUL in data", body(&[(&a, b"x\0y"), (&c, b"\0\0")], &end)),
        (
            "unmatched then ours",
            body(&[(&a, b"--nope"), (&b, b"2"), (&c, b"3")], &end),
        ),
    ];
    let f = |(label, b): &(&str, Vec<u8>)| post(label, &ct(B), b);
    bodies.iter().map(f).collect()
}

/// A part with `headers` and the value "v", then a well-formed part "ok".
fn with_headers(label: &str, headers: &str) -> Case {
    let end = format!("--{B}--\r\n");
    let parts = [(headers, &b"v"[..]), (&field("ok"), b"1")];
    post(label, &ct(B), &body(&parts, &end))
}

/// Part header lines: folding, colons, lengths, duplicates.
fn header_cases() -> Vec<Case> {
    let a = field("a");
    let edge = |n: usize| format!("{a}\r\nX-L: {}", "e".repeat(n - 7));
    let lines: Vec<(&str, String)> = vec![
        ("header line of 4095", edge(4095)),
        ("header line of 4096", edge(4096)),
        (
            "CR at the buffer's edge in a header",
            format!("{}\r", edge(4097)),
        ),
        ("huge header", format!("{a}\r\nX-Big: {}", "h".repeat(5000))),
        (
            "folded too long",
            format!("{a}\r\nX-F: {}\r\n {}", "f".repeat(3000), "g".repeat(3000)),
        ),
        ("CR-only line", format!("{a}\r\n\r")),
        ("LF-only header", format!("{a}\nX-A: 1")),
        ("non-ASCII header", format!("{a}\r\nX-\u{e9}: \u{e9}")),
        (
            "lowercase header",
            "content-disposition: form-data; name=\"a\"".into(),
        ),
        ("headers after", format!("{a}\r\nX-A: 1\r\nX-B:\t 2  ")),
        ("empty header value", format!("{a}\r\nX-E:")),
        ("header without colon", format!("{a}\r\nno colon here")),
        ("header name missing", format!("{a}\r\n: x")),
        (
            "duplicate header",
            format!("{a}\r\nContent-Type: a\r\ncontent-type: b\r\n x"),
        ),
        (
            "folding",
            "Content-Disposition: form-data;\r\n name=\"a\"\r\nX-T: 1\r\n\tmore".into(),
        ),
        (
            "invalid folding",
            format!("{a}\r\nX-T: 1\r\n\x0b\x0cmore\r\n \x0bx"),
        ),
        ("folding first", format!(" folded\r\n{a}")),
        (
            "folding after a duplicate",
            format!("{a}\r\nX-A: 1\r\nx-a: 2\r\n more"),
        ),
        ("NUL in a header", format!("{a}\r\nX-N: a\0b")),
        ("no Content-Disposition", "Content-Type: text/plain".into()),
    ];
    let mut cases: Vec<Case> = lines.iter().map(|(l, h)| with_headers(l, h)).collect();
    // A failed empty line leaves the part in its headers: the data is read as headers.
    cases.push(post(
        "data read as headers",
        &ct(B),
        format!("--{B}\r\nX-A: 1\r\n\r\nkey: value\r\nplain\r\n\r\n--{B}--\r\n").as_bytes(),
    ));
    let bad = "Content-Disposition: form-data; name=a; x=1";
    cases.push(post(
        "second empty line after a failure",
        &ct(B),
        format!("--{B}\r\n{bad}\r\n\r\n\r\n1\r\n--{B}--\r\n").as_bytes(),
    ));
    cases
}

/// Content-Disposition values: every code `parse_content_disposition` returns, quoting,
/// `filename*`.
///
/// Not here: a quoted value left open (`name="abc`). 3.0.9 then reads past the string's
/// end, and what it finds there decides (`name="abc` was refused, `filename="x` after a
/// name taken, in one run): no engine can agree with that every time.
fn disposition_cases() -> Vec<Case> {
    let values: &[(&str, &str)] = &[
        ("not form-data", "attachment; name=\"a\""),
        ("form-data only", "form-data"),
        ("form-data blanks", "form-data \t"),
        ("FORM-DATA", "FORM-DATA; name=\"a\""),
        ("no semicolon", "form-data name=a"),
        ("trailing semicolon", "form-data; name=a;"),
        ("trailing semicolon blank", "form-data; name=a; "),
        ("name without value", "form-data; name"),
        ("name blank", "form-data; name "),
        ("name space =", "form-data; name = a"),
        ("name then junk", "form-data; name x"),
        ("name =", "form-data; name="),
        ("unquoted", "form-data; name=a-b.c'd"),
        ("unquoted stops", "form-data; name=a(b"),
        ("unquoted then space", "form-data; name=ab c"),
        ("single quotes", "form-data; name='a'"),
        ("quote in double", "form-data; name=\"a'b\""),
        ("after quote", "form-data; name=\"a\"x"),
        ("after quote blank", "form-data; name=\"a\" x"),
        ("escapes", r#"form-data; name="a\"b\\c\d""#),
        ("escape at end", r#"form-data; name="a\"#),
        ("open quote only", "form-data; name=\""),
        ("unknown parameter", "form-data; name=\"a\"; size=3"),
        ("duplicate name", "form-data; name=\"a\"; name=\"b\""),
        (
            "duplicate filename",
            "form-data; name=\"a\"; filename=\"x\"; filename=\"y\"",
        ),
        ("no name", "form-data; filename=\"x\""),
        ("empty name", "form-data; name=\"\""),
        ("empty filename", "form-data; name=\"a\"; filename=\"\""),
        (
            "filename with space",
            "form-data; name=\"a\"; filename = \"x\"",
        ),
        ("filename quote", "form-data; name=\"a\"; filename='x'"),
        (
            "filename*",
            "form-data; name=\"a\"; filename=\"x\"; filename*=UTF-8''a%20b.txt",
        ),
        (
            "filename* language",
            "form-data; name=\"a\"; filename*=utf-8'en'x; filename=\"y\"",
        ),
        (
            "filename* alone",
            "form-data; name=\"a\"; filename*=UTF-8''x",
        ),
        (
            "filename* no charset",
            "form-data; name=\"a\"; filename*=''x; filename=y",
        ),
        (
            "filename* no language end",
            "form-data; name=\"a\"; filename*=UTF-8'en",
        ),
        (
            "filename* bad escape",
            "form-data; name=\"a\"; filename*=UTF-8''a%2; filename=y",
        ),
        (
            "filename* bad char",
            "form-data; name=\"a\"; filename*=UTF-8''a b; filename=y",
        ),
        (
            "filename* twice",
            "form-data; name=\"a\"; filename*=U''a; filename*=U''b; filename=y",
        ),
        ("tabs", "form-data;\tname=\"a\"\t;\tfilename=\"f\""),
        (
            "non-ASCII",
            "form-data; name=\"\u{e9}\"; filename=\"\u{e9}.txt\"",
        ),
    ];
    values
        .iter()
        .map(|(l, v)| with_headers(l, &format!("Content-Disposition: {v}")))
        .collect()
}

/// Content-Type values: the boundary's quoting, white space and errors.
fn content_type_cases() -> Vec<Case> {
    let part = |b: &str| format!("--{b}\r\n{}\r\n\r\n1\r\n--{b}--\r\n", field("a")).into_bytes();
    let types: &[(&str, &str)] = &[
        ("multipart/form-data; boundary=\"XyZ\"", "XyZ"),
        ("multipart/form-data; boundary=\"XyZ\"", "\"XyZ\""),
        ("multipart/form-data; boundary = XyZ", "XyZ"),
        ("multipart/form-data; boundary= XyZ", " XyZ"),
        ("multipart/form-data; boundary =XyZ", "XyZ"),
        ("multipart/form-data boundary=XyZ", "XyZ"),
        ("multipart/form-data;; boundary=XyZ", "XyZ"),
        ("multipart/form-datax; boundary=XyZ", "XyZ"),
        ("Multipart/Form-Data; boundary=XyZ", "XyZ"),
        ("multipart/form-data; charset=utf-8; boundary=XyZ", "XyZ"),
        ("multipart/form-data; boundary=XyZ; charset=utf-8", "XyZ"),
        ("multipart/form-data; boundary=XyZ, x=y", "XyZ, x=y"),
        ("multipart/form-data; boundary=\"XyZ", "XyZ"),
        ("multipart/form-data; boundary=XyZ\"", "XyZ"),
        ("multipart/form-data; boundary=\"\"", "XyZ"),
        ("multipart/form-data; boundary=", "XyZ"),
        ("multipart/form-data; boundary=;x", "XyZ"),
        ("multipart/form-data; boundary", "XyZ"),
        ("multipart/form-data; Boundary=XyZ", "XyZ"),
        ("multipart/form-data; boundary=XyZ; boundary=Q", "XyZ"),
        ("multipart/form-data; boundary=a{b", "a{b"),
        ("multipart/form-data; boundary=XyZ ", "XyZ "),
        ("multipart/form-data; boundary=a b", "a b"),
        ("multipart/form-data; boundary=xboundary=", "XyZ"),
        ("multipart/form-data", "XyZ"),
        ("multipart/form-data; boundary=\t\"XyZ\"", "XyZ"),
        (
            "multipart/form-data; boundary=--------397236876",
            "--------397236876",
        ),
        (
            "multipart/form-data; boundary=(a'b)+_,-./:=?",
            "(a'b)+_,-./:=?",
        ),
    ];
    let mut cases: Vec<Case> = types
        .iter()
        .enumerate()
        .map(|(i, (t, b))| post(&format!("type {i}: {t}"), t, &part(b)))
        .collect();
    let long = format!("multipart/form-data; boundary={}", "b".repeat(1010));
    cases.push(post("type too long", &long, &part(&"b".repeat(1010))));
    let bchars = "b".repeat(990);
    let near = format!("multipart/form-data; boundary={bchars}");
    cases.push(post("long boundary", &near, &part(&bchars)));
    cases.push(case(
        "two types",
        "POST",
        "/",
        &[
            ("content-type", b"text/plain"),
            ("content-type", ct(B).as_bytes()),
        ],
        &part(B),
    ));
    cases
}

/// The CRS regression tests' requests whose Content-Type says multipart.
fn crs_multipart_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (label, input) in crs_labelled_inputs() {
        let multipart = input.headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("content-type")
                && v.to_ascii_lowercase().windows(9).any(|w| w == b"multipart")
        });
        if !multipart || input.fields.contains_key("encoded_request") {
            continue;
        }
        if let Some(c) = crs_case(&label, &input.fields, &input.headers) {
            cases.push(c);
        }
    }
    cases
}

/// A case from a CRS test's fields and headers, if `http` takes them.
fn crs_case(
    label: &str,
    fields: &std::collections::HashMap<String, Vec<u8>>,
    headers: &[(String, Vec<u8>)],
) -> Option<Case> {
    let text = |k: &str| {
        fields
            .get(k)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let method = text("method").unwrap_or_else(|| "GET".into());
    let uri = text("uri").unwrap_or_else(|| "/".into());
    http::Method::from_bytes(method.as_bytes()).ok()?;
    if uri.contains('\0') {
        return None;
    }
    let mut hs: Vec<(&str, &[u8])> = Vec::new();
    for (k, v) in headers {
        http::HeaderName::from_bytes(k.as_bytes()).ok()?;
        http::HeaderValue::from_bytes(v).ok()?;
        hs.push((k, v));
    }
    let body = fields.get("data").cloned().unwrap_or_default();
    Some(case(label, &method, &uri, &hs, &body))
}

fn assert_same(cases: &[Case]) {
    let (n, differences) = compare(cases);
    assert!(
        differences.is_empty(),
        "{} of {n} requests differ from libmodsecurity 3.0.9:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

#[test]
fn line_endings_and_boundaries_match_libmodsecurity() {
    assert_same(&ending_cases());
}

#[test]
fn parts_match_libmodsecurity() {
    assert_same(&part_cases());
}

#[test]
fn part_headers_match_libmodsecurity() {
    assert_same(&header_cases());
}

#[test]
fn content_dispositions_match_libmodsecurity() {
    assert_same(&disposition_cases());
}

#[test]
fn content_types_match_libmodsecurity() {
    assert_same(&content_type_cases());
}

#[test]
fn crs_multipart_requests_match_libmodsecurity() {
    let cases = crs_multipart_cases();
    assert!(
        cases.len() > 50,
        "{} CRS multipart requests: is coraza-coreruleset v4.22.0 in the Go module cache?",
        cases.len()
    );
    assert_same(&cases);
}
