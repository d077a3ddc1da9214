//! The differential test: every transformation on a corpus of values, run by
//! libmodsecurity 3.0.9 (the oracle) and by [`Transform::apply`], compared byte for byte.
//!
//! libmodsecurity's result comes back through rules: one per transformation and slice of
//! the result, `t:none,t:NAME,t:hexEncode` on `ARGS_GET:v` (the value sent
//! percent-encoded, so any byte reaches it), whose `@rx` captures one slice of the hex and
//! whose `logdata` carries it into the match record. Slices stay under [`MAX_DATA`], so
//! neither libmodsecurity nor Sluice truncates them.

use super::{Held, NAMES, Transform};
use crate::engine::MAX_MESSAGES;
use crate::rules::pieces;
use crate::tests::{get, route};
use crate::{MAX_DATA, Rules, inspect};
use sluice_config::{WafInline, WafRuleSet};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// Hex characters per slice: with the `x` that marks an empty result, under [`MAX_DATA`].
const SLICE: usize = 198;
const _: () = assert!(SLICE < MAX_DATA);

/// The carrier's own check: `t:none` alone, which must give the value back.
const IDENTITY: usize = 99;

/// Every transformation once (`NAMES` spells two of them twice).
fn transforms() -> Vec<Transform> {
    let mut all: Vec<Transform> = Vec::new();
    for &(_, t) in NAMES {
        if !all.contains(&t) {
            all.push(t);
        }
    }
    all
}

fn rule_id(index: usize, slice: usize) -> u32 {
    u32::try_from(100_000 + index * 100 + slice).expect("a small id")
}

/// Every chain the oracle runs, by index: each transformation, and [`IDENTITY`].
fn chains() -> Vec<(usize, String)> {
    transforms()
        .iter()
        .enumerate()
        .map(|(i, t)| (i, format!("t:{},", t.name())))
        .chain([(IDENTITY, String::new())])
        .collect()
}

/// Rules that report each of `chains`' results in up to `slices` slices.
fn rules(chains: &[(usize, String)], slices: usize) -> Arc<Rules> {
    let mut text = String::new();
    for (index, chain) in chains {
        for slice in 0..slices {
            let pattern = if slice == 0 {
                format!("^([0-9a-f]{{0,{SLICE}}})")
            } else {
                format!("^(?:[0-9a-f]{{{SLICE}}}){{{slice}}}([0-9a-f]{{1,{SLICE}}})")
            };
            let _ = writeln!(
                text,
                "SecRule ARGS_GET:v \"@rx {pattern}\" \"id:{id},phase:1,pass,log,capture,\
                 t:none,{chain}t:hexEncode,msg:'t',logdata:'x%{{TX.1}}'\"",
                id = rule_id(*index, slice),
            );
        }
    }
    let set = WafRuleSet {
        engine: sluice_config::WafEngine::ModSecurity,
        name: "oracle".into(),
        files: Vec::new(),
        rules: Some(WafInline {
            text,
            file: "transform/tests.rs".into(),
            line: 1,
        }),
    };
    Arc::new(Rules::build(&pieces(&set, &route())).expect("the oracle's rules compile"))
}

/// libmodsecurity as the oracle: one rule set that gives the first slice of every
/// chain's result, and one per chain for results longer than a slice. (A transaction
/// keeps at most `MAX_MESSAGES` match records, so no one set can report everything.)
struct Oracle {
    all: Arc<Rules>,
    each: BTreeMap<usize, Arc<Rules>>,
}

/// Slices of one chain's result the per-chain sets report: results up to 3,960 bytes.
const SLICES: usize = 40;

impl Oracle {
    fn new() -> Oracle {
        let chains = chains();
        Oracle {
            all: rules(&chains, 1),
            each: chains
                .iter()
                .map(|c| (c.0, rules(std::slice::from_ref(c), SLICES)))
                .collect(),
        }
    }

    /// Each chain's result (by index) on `value`.
    fn results(&self, value: &[u8]) -> BTreeMap<usize, Vec<u8>> {
        let mut hex = reported(&self.all, value);
        for (index, h) in &mut hex {
            if h.len() == SLICE {
                let mut whole = reported(&self.each[index], value);
                *h = whole
                    .remove(index)
                    .expect("the chain's first slice matches");
                assert!(
                    h.len() < SLICES * SLICE,
                    "a result filled every slice; raise SLICES for b\"{}\"",
                    show(value)
                );
            }
        }
        hex.into_iter().map(|(i, h)| (i, unhex(&h))).collect()
    }
}

/// The hex of each chain's result that `rules` report for `value`.
fn reported(rules: &Arc<Rules>, value: &[u8]) -> BTreeMap<usize, String> {
    let mut target = String::from("/t?v=");
    for b in value {
        let _ = write!(target, "%{b:02X}");
    }
    let verdict = inspect(rules, &get(&target), false).0;
    assert!(
        verdict.matches.len() < MAX_MESSAGES,
        "some match records may have been dropped"
    );
    let mut hex: BTreeMap<usize, BTreeMap<usize, String>> = BTreeMap::new();
    for m in verdict.matches {
        let id = m.id as usize - 100_000;
        let data = m.data.strip_prefix('x').expect("the slice's marker");
        assert!(data.len() <= SLICE, "a slice came back cut: {:?}", m.data);
        hex.entry(id / 100)
            .or_default()
            .insert(id % 100, data.to_string());
    }
    hex.into_iter()
        .map(|(index, parts)| {
            assert!(
                parts.keys().copied().eq(0..parts.len()),
                "slices missing: {parts:?}"
            );
            (index, parts.into_values().collect())
        })
        .collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    hex.as_bytes()
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// A value as Rust writes a byte string, for the failure message.
fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// Hand-picked edge cases, by the transformations they are for (every transformation runs
/// on every value).
#[rustfmt::skip]
const EDGE_CASES: &[&[u8]] = &[
    // Everything: empty, one byte, NULs, high bytes, whitespace of every kind.
    b"", b"a", b"\0", b"a\0b", b"\0\0x\0", b"\x80\xff\xfe",
    b" \t\n\x0b\x0c\r x \t\n\x0b\x0c\r ", b"\xa0a\xc2b\xc2\xa0c", b"MiXeD CaSe \xc3\x89", b"0",
    b"9", b"=", b"\\",
    // urlDecode / urlDecodeUni.
    b"%41%4a%4A+%2b", b"%", b"%4", b"%zz%4g", b"%%41", b"%u0041", b"%U0041", b"%uff21%uFF41",
    b"%uff00%uff5f%uff5e", b"%u", b"%u004", b"%u00zz", b"a%u12", b"%u0000x", b"%00%ff",
    b"%u263a%ud800", b"+%20+",
    // hexDecode / sqlHexDecode.
    b"41424", b"4142", b"zz", b"4g", b"0x41", b"0x41b", b"0x41bc", b"0x4", b"0X4142 x", b"a0x",
    b"SELECT 0x414243,0x00,0x", b"0x", b"x0x41", b"00x41", b"abc", b"0x41\0b", b"0x4100", b"0x41x",
    // base64Decode / base64DecodeExt.
    b"QUJD", b"QUJDRA==", b"QUJDRA=", b"QUJDRA", b"QUJ", b"QQ", b"Q", b"QUJD\r\nRA==",
    b"QUJD\nRA==", b"QU JD", b"QUJD  ", b"  QUJD", b"QUJD\rRA==", b"QQ==QQ==", b"QQ=A", b"Q===",
    b"====", b"QUJDR=", b"QUJDR", b"QUJDR9", b"QUJD9", b"QUJDRA==\0QUJD", b"QU\0JD", b"QUJD*RA",
    b"-_QUJD", b"QUJDRE==", b"QUJD\xffRA==",
    // htmlEntityDecode.
    b"&#x41", b"&#x41;", b"&#65", b"&#65;x", b"&#", b"&#x", b"&#xZ", b"&#Z", b"&", b"&;",
    b"&amp;&AMP;&lt&gt;&quot;&nbsp;&NbSp", b"&foo;&amp",
    b"&#x100;&#256;&#999999999999999999999;", b"&#xffffffffffffffffffff;", b"&#x0;", b"&&#x41;",
    b"&a&b",
    // jsDecode.
    b"\\u0041\\uff21\\uFF41\\u00e9", b"\\x41\\x4", b"\\101\\1011\\400\\777\\8",
    b"\\a\\b\\f\\n\\r\\t\\v\\q\\'\\\"", b"\\u004", b"\\U0041", b"\\X41", b"abc\\", b"\\0",
    b"\\08",
    // cssDecode.
    b"\\41\\041\\0041\\00041\\000041\\0000041", b"\\ff21 x\\FF41\\fff21\\0ff21", b"\\4 1",
    b"\\\nx", b"\\", b"a\\", b"\\g\\\\", b"\\0 x", b"\\a\tb", b"\\123456789",
    // escapeSeqDecode.
    b"\\a\\b\\f\\n\\r\\t\\v\\\\\\?\\'\\\"\\q", b"\\x41\\X41\\x4\\xzz",
    b"\\101\\0\\777\\7777\\8",
    // cmdLine.
    b"C:\\Win\"dows\\sys'tem32 /c  dir ;, ^p^i^n^g", b"a  /b  (c", b"\" /x", b"A,B;C\tD\rE\nF",
    // compressWhitespace / trim.
    b"  a  b  ", b"\x0b\x0ca\x0b", b"\xa0 a \xa0",
    // normalizePath / normalizePathWin.
    b"/a/b/../c/./d", b"/../a", b"../a/../..", b"a/../../b", b"./a", b"/./", b"//a//b//",
    b"/a/b/..", b"/a/b/.", b"a/b/../", b"..", b".", b"/", b"//", b"/..", b"a/..", b"/a/../",
    b"x/y/z/../../..", b"x/y/z/../../../..", b".../a", b"a/.../b", b"/a/.b/..c/",
    b"\\a\\b\\..\\c", b"C:\\Windows\\..\\system32\\.\\x", b"a\\\\\\b", b"a/\\\\b", b"\\..\\a",
    b"..\\..\\x", b"\\", b"a\\", b"/a\\", b"\\\\server\\share\\..\\y",
    b"...", b"a.", b".a", b". .", b"a..b", b"..a", b"a..", b"\0.", b".\0",
    // removeComments / replaceComments / removeCommentsChar.
    b"a/*b*/c", b"a/*b*/", b"a/*b", b"/*a*//*b*/c", b"/*a*/#b", b"a<!--b-->c", b"a<!--b",
    b"a<!--b-->", b"a--b", b"a#b", b"a-b", b"*/a/*", b"a/**/b--c", b"<!-", b"/*/", b"-->x",
    b"SELECT/**/1 -- x", b"a/*b-->c*/d", b"<!--/*x-->*/",
    // utf8toUnicode.
    b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xc3", b"\xc3A", b"\xe2\x82",
    b"\xe2\x82A", b"\xf0\x9f\x98", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80",
    b"\xf0\x80\x80\x80", b"\xf0\x8d\xa0\x80", b"\xf5\x80\x80\x80", b"\xf7\xbf\xbf\xbf", b"\xf5",
    b"\xf8\x88\x80\x80\x80", b"\xbf\x80", b"\xff", b"a\xc3\xa9\0\xc3\xa9", b"\xf4\x8f\xbf\xbf",
    b"\xef\xbf\xbf", b"\xdf\xbf", b"\xed\xbf\xbf", b"\xf0\x8d\xbf\xbf",
    // urlEncode.
    b"a b*c-_.~!/\xff\0",
];

/// [`EDGE_CASES`] and every single byte.
fn edge_cases() -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = EDGE_CASES.iter().map(|v| v.to_vec()).collect();
    all.extend((0..=255u8).map(|b| vec![b]));
    all
}

/// Long values (slices of the result past the first).
fn long_cases() -> Vec<Vec<u8>> {
    vec![
        b"%41".repeat(300),
        b"\xc3\xa9".repeat(150),
        b"/a/./b/../".repeat(60),
        b"QUJD".repeat(200),
        (0..=255u8).cycle().take(700).collect(),
        b"&#x41;/*x*/\\u0041 ".repeat(40),
    ]
}

/// Values drawn from bytes the transformations treat specially, and from any byte, by a
/// fixed generator (xorshift), so that a failure is the same on every run.
fn pseudo_random(count: usize) -> Vec<Vec<u8>> {
    const SPECIAL: &[u8] = b"%uUxX0f9aF&#;\\/.*-<!>\"' \t\n\r\x0b\x0c\0+=^,()Q\x80\xa0\xbf\xc2\xc3\xe2\xed\xf0\xf5\xff";
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let len = (next() % 48) as usize;
            (0..len)
                .map(|_| {
                    let r = next();
                    if r % 4 == 0 {
                        (r >> 8) as u8
                    } else {
                        SPECIAL[((r >> 8) % SPECIAL.len() as u64) as usize]
                    }
                })
                .collect()
        })
        .collect()
}

/// Runs `values` through both engines; returns the number of comparisons and, for each
/// mismatch, a line naming the transformation, the value and both results.
fn compare(oracle: &Oracle, values: &[Vec<u8>]) -> (usize, Vec<String>) {
    let all = transforms();
    let mut out = Vec::new();
    let mut mismatches = Vec::new();
    let mut compared = 0;
    for value in values {
        let theirs = oracle.results(value);
        assert_eq!(
            theirs.get(&IDENTITY).map(Vec::as_slice),
            Some(value.as_slice()),
            "the carrier itself changed the value"
        );
        for (index, t) in all.iter().enumerate() {
            let expected = theirs
                .get(&index)
                .expect("every rule's first slice matches");
            t.apply(value, &mut out);
            compared += 1;
            if value.len() > 1 && t.leaves_held(Held::of(value)) != t.leaves(value) {
                mismatches.push(format!(
                    "t:{} on b\"{}\": the summary of its bytes and the value disagree",
                    t.name(),
                    show(value),
                ));
            }
            if t.leaves(value) && out != *value {
                mismatches.push(format!(
                    "t:{} on b\"{}\" is said to leave it as it is, and gives b\"{}\"",
                    t.name(),
                    show(value),
                    show(&out),
                ));
            }
            if out != *expected {
                mismatches.push(format!(
                    "t:{} on b\"{}\": libmodsecurity b\"{}\", native b\"{}\"",
                    t.name(),
                    show(value),
                    show(expected),
                    show(&out),
                ));
            }
        }
    }
    (compared, mismatches)
}

#[test]
fn every_transformation_matches_libmodsecurity_byte_for_byte() {
    let mut values = edge_cases();
    values.extend(long_cases());
    values.extend(pseudo_random(600));
    let (compared, mismatches) = compare(&Oracle::new(), &values);
    assert!(
        mismatches.is_empty(),
        "{} of {} results differ from libmodsecurity 3.0.9:\n{}",
        mismatches.len(),
        compared,
        mismatches.join("\n")
    );
    assert_eq!(compared, values.len() * transforms().len());
}

/// A step's quick test of a value (memchr or a block-wise range test) and the summary of
/// the value's bytes agree for every byte, wherever it stands in a long value; and a value
/// said to come through unchanged does.
#[test]
fn a_steps_byte_searches_agree_with_the_summary_of_its_bytes() {
    let mut out = Vec::new();
    for t in transforms() {
        for b in 0..=255u8 {
            for at in [0, 63, 64, 200] {
                let mut value = vec![b'='; 201];
                value[at] = b;
                assert_eq!(
                    t.leaves(&value),
                    t.leaves_held(Held::of(&value)),
                    "t:{} with byte {b:#04x} at {at}",
                    t.name()
                );
                if t.leaves(&value) {
                    t.apply(&value, &mut out);
                    assert_eq!(out, value, "t:{} with byte {b:#04x} changed it", t.name());
                }
            }
        }
    }
}
