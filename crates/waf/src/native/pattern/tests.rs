//! The prefilter against PCRE2 pattern by pattern: PCRE constructs one by one, then every
//! `@rx` of the Core Rule Set (4.22 and Debian's 3.3.4) on the payloads of CRS's own
//! regression tests.

use super::translate::translate;
use super::{PatternSet, pcre};
use crate::native::{Kind, Op, RuleSet, load};
use crate::rules::Piece;

/// Every (pattern, value) on which the set and PCRE2 disagree, asked both ways: all
/// patterns at once ([`PatternSet::matches`]), and each pattern's unit alone
/// ([`PatternSet::scan`], as the engine asks), which must say the same of the unit's
/// patterns.
fn disagreements(patterns: &[&str], values: &[Vec<u8>]) -> Vec<String> {
    let set = PatternSet::new(patterns).unwrap();
    let pcres: Vec<_> = patterns.iter().map(|p| pcre(p).unwrap()).collect();
    let mut scratch = set.scratch();
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for v in values {
        out.clear();
        set.matches(v, &mut scratch, &mut out);
        let expected: Vec<usize> = (0..patterns.len())
            .filter(|&i| pcres[i].is_match(v).unwrap_or(false))
            .collect();
        let units: std::collections::BTreeSet<usize> =
            (0..patterns.len()).map(|i| set.unit(i)).collect();
        for unit in units {
            let mut alone = Vec::new();
            set.scan(unit, v, &mut scratch, &mut alone);
            for i in (0..patterns.len()).filter(|&i| set.unit(i) == unit) {
                if alone.contains(&i) != expected.contains(&i) {
                    bad.push(format!(
                        "value {:?}: pattern {:?} asked through its unit {unit}: {}",
                        String::from_utf8_lossy(v),
                        patterns[i],
                        alone.contains(&i)
                    ));
                }
            }
            if alone.iter().any(|&j| set.unit(j) != unit) {
                bad.push(format!("unit {unit} answered for another unit's pattern"));
            }
        }
        if out != expected {
            let only_set: Vec<_> = out.iter().filter(|i| !expected.contains(i)).collect();
            let only_pcre: Vec<_> = expected.iter().filter(|i| !out.contains(i)).collect();
            let show =
                |ids: &[&usize]| -> Vec<&str> { ids.iter().map(|&&i| patterns[i]).collect() };
            bad.push(format!(
                "value {:?}: only the set {:?}, only PCRE2 {:?}",
                String::from_utf8_lossy(v),
                show(&only_set),
                show(&only_pcre)
            ));
        }
    }
    bad
}

#[test]
fn pcre_constructs_match_as_pcre_matches_them() {
    let patterns = [
        r"a\vb",
        r"[\w.-]+@",
        r"a{",
        r"x{2}y",
        r"{foo}",
        r"\<script",
        r"[a&&b]",
        r"[a-c-e]",
        r"[~~]",
        r"foo(?=bar)",
        r"foo(?!bar)",
        r"(?<=a)b",
        r"(a)\1",
        r"(?>ab|a)c",
        r"a++b",
        r"[]a]",
        r"[^]a]",
        r"\x{41}\x42\x7",
        r"(?i)select\s+from",
        "caf\u{e9}",
        r"[\x80-\xff]{2}",
        r"^line$",
        r"a.b",
        r"(?#comment)z",
        r"\bword\b",
        r"[[:alpha:]]+[[:digit:]]",
        r"\.\/\-\@\%",
        r"\d{2,}-\d{,3}",
        r"(?|(a)|(b))c",
        r"(?i:AB)c",
        r"^(?:|x)$",
        r"^.",
        r"[\h]x",
        r"a\Z",
        r"\Aab\z",
        r"[a-]x",
        r"[-a]y",
        r"[\d-]q",
        r"^$",
        r"^a$",
        r"(?i)^(?:x|[^y])*$",
    ];
    let values: Vec<Vec<u8>> = [
        "a\x0bb",
        "a\nb",
        "x.y-z@",
        "a{",
        "xxy",
        "{foo}",
        "<script",
        "a&&b",
        "&",
        "-",
        "d",
        "~",
        "foobar",
        "foobaz",
        "ab",
        "aa",
        "abc",
        "ac",
        "aab",
        "]",
        "b",
        "ABB\x07",
        "SELECT  FROM",
        "caf\u{e9}",
        "\u{e9}\u{e9}",
        "x\nline\ny",
        "line\n",
        "a\nb",
        "z",
        "a word here",
        "ab12",
        "./-@%",
        "12-123",
        "12-1234",
        "ac",
        "bc",
        "abc",
        "ABc",
        "\tx",
        "\u{a0}x",
        "a\n",
        "a",
        "ab",
        "-x",
        "ax",
        "-y",
        "5q",
        "-q",
        "zq",
        "",
        "\n",
        "a\n",
        "b\n\n",
        "x\ny\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let bad = disagreements(&patterns, &values);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The constructs with no exact equivalent are marked so, and confirmed by PCRE2.
    for p in [r"foo(?=bar)", r"(a)\1", r"(?>ab|a)c", r"a++b"] {
        assert!(!translate(p).unwrap().exact, "{p}");
    }
    for p in [r"a\vb", r"[\w.-]+@", r"\<script", "caf\u{e9}"] {
        assert!(translate(p).unwrap().exact, "{p}");
    }
}

fn crs_sets() -> Vec<RuleSet> {
    let dir = crate::native::crs_module::dir();
    let v4 = load(&[Piece::File(dir.join("rules/@owasp_crs/*.conf"))]).unwrap();
    let v3_files: Vec<Piece> = glob::glob("/usr/share/modsecurity-crs/rules/*.conf")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|p| !p.to_string_lossy().contains("-910-"))
        .map(Piece::File)
        .collect();
    let v3 = load(&v3_files).unwrap();
    vec![v4, v3]
}

/// Every literal `@rx` of `set`, chained rules' included.
fn rx_patterns(set: &RuleSet) -> Vec<String> {
    let mut out = Vec::new();
    for r in &set.rules {
        let ops = std::iter::once(match &r.kind {
            Kind::Match { operator, .. } => Some(operator),
            _ => None,
        })
        .flatten()
        .chain(r.chain.iter().map(|l| &l.operator));
        for op in ops {
            if let Op::Rx(e) = &op.op
                && let Some(p) = e.literal()
            {
                out.push(p.to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The payloads of CRS's regression tests: each test's URI, body and header values as
/// written, and percent-decoded.
fn corpus(dir: &std::path::Path) -> Vec<Vec<u8>> {
    let mut out = std::collections::BTreeSet::new();
    for f in glob::glob(&dir.join("**/*.yaml").to_string_lossy())
        .unwrap()
        .filter_map(Result::ok)
    {
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines() {
            let Some((key, value)) = line.trim().split_once(": ") else {
                continue;
            };
            if key.starts_with('-')
                || matches!(
                    key,
                    "desc" | "author" | "description" | "method" | "version"
                )
            {
                continue;
            }
            let v = value.trim().trim_matches('"').replace("\\\"", "\"");
            out.insert(percent_decode(v.as_bytes()));
            out.insert(v.into_bytes());
        }
    }
    out.into_iter().collect()
}

fn percent_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            s[i],
            s.get(i + 1).and_then(|&b| hex(b)),
            s.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[test]
fn every_crs_pattern_matches_the_regression_payloads_as_pcre2_does() {
    let sets = crs_sets();
    let values = corpus(&crate::native::crs_module::dir().join("tests"));
    assert!(values.len() > 5000, "{} payloads", values.len());
    for set in &sets {
        let owned = rx_patterns(set);
        let patterns: Vec<&str> = owned.iter().map(String::as_str).collect();
        let ps = PatternSet::new(&patterns).unwrap();
        let (exact, confirm, pcre_only) = ps.coverage();
        // Nearly all of CRS is decided by the automaton alone.
        assert!(
            exact * 100 >= patterns.len() * 95,
            "{exact} exact, {confirm} confirmed, {pcre_only} PCRE2 of {}",
            patterns.len()
        );
        let bad = disagreements(&patterns, &values);
        assert!(
            bad.is_empty(),
            "{} of {} payloads disagree:\n{}",
            bad.len(),
            values.len(),
            bad[..bad.len().min(20)].join("\n")
        );
    }
}

/// The whole-set automaton ([`super::whole::WholeSet`]) over several chains' prefilters answers
/// each chain's level-1 units as their own automata do, on CRS's regression payloads and
/// on values ending in a newline (where some patterns need PCRE2's word): CRS 4.22's
/// patterns dealt to five chains, some to several, every third of level 2; no unit holds
/// patterns of two levels.
#[test]
fn the_whole_set_answers_each_chains_units_as_they_answer() {
    let owned = rx_patterns(&crs_sets()[0]);
    // A third of the payloads, each also with a newline: a fresh cache of states per value
    // (below) makes every value determinize its own.
    let mut values: Vec<Vec<u8>> = corpus(&crate::native::crs_module::dir().join("tests"))
        .into_iter()
        .step_by(3)
        .collect();
    let newline: Vec<Vec<u8>> = values.iter().map(|v| [&v[..], b"\n"].concat()).collect();
    values.extend(newline);
    let chains = 5;
    let mut sets = Vec::new();
    let mut level1 = Vec::new();
    for c in 0..chains {
        // Chain c's patterns: every fifth from c, and every seventh (shared with others).
        let mut mine: Vec<(&str, u8)> = owned
            .iter()
            .enumerate()
            .filter(|(i, _)| i % chains == c || i % 7 == 0)
            .map(|(i, p)| (p.as_str(), if i % 3 == 0 { 2 } else { 1 }))
            .collect();
        mine.sort_by_key(|&(_, level)| level);
        let patterns: Vec<&str> = mine.iter().map(|&(p, _)| p).collect();
        let levels: Vec<u32> = mine.iter().map(|&(_, l)| u32::from(l)).collect();
        let set = PatternSet::grouped(&patterns, &levels).unwrap();
        for i in 1..patterns.len() {
            if levels[i] != levels[i - 1] && set.modes[i] != super::Mode::Pcre {
                let earlier = (0..i).rev().find(|&j| set.modes[j] != super::Mode::Pcre);
                assert!(
                    earlier.is_none_or(|j| set.unit(j) != set.unit(i)),
                    "a unit of two levels"
                );
            }
        }
        level1.push(levels.iter().filter(|&&l| l == 1).count());
        sets.push(Some(set));
    }
    let whole = super::whole::WholeSet::new(&sets, &level1).expect("a whole set");
    let mut scratches: Vec<_> = sets.iter().map(|s| s.as_ref().unwrap().scratch()).collect();
    let (mut scanned, mut bad) = (0, Vec::new());
    for v in &values {
        // A scratch space of its own for each value: one kept from payload to payload
        // fills with their states and gives up on most (the chains' automata answer then,
        // which is not what this test is about).
        let mut found = Vec::new();
        if !whole.scan(v, &mut whole.scratch(), &mut found) {
            continue;
        }
        scanned += 1;
        for (c, set) in sets.iter().enumerate() {
            let set = set.as_ref().unwrap();
            let covered = whole.covered(c as u32);
            let mut theirs = Vec::new();
            for unit in (0..64).filter(|&u| covered & (1 << u) != 0) {
                set.scan(unit, v, &mut scratches[c], &mut theirs);
            }
            let mut ours = Vec::new();
            super::whole::WholeSet::answer(set, c as u32, covered, &found, v, &mut ours);
            theirs.sort_unstable();
            ours.sort_unstable();
            if ours != theirs {
                bad.push(format!(
                    "chain {c}, {:?}: {ours:?} against {theirs:?}",
                    String::from_utf8_lossy(v)
                ));
            }
        }
    }
    assert!(
        sets.iter()
            .enumerate()
            .all(|(c, _)| whole.covered(c as u32) != 0)
    );
    assert!(
        scanned * 2 > values.len(),
        "the whole set scanned {scanned} of {}",
        values.len()
    );
    assert!(
        bad.is_empty(),
        "{} disagree:\n{}",
        bad.len(),
        bad[..bad.len().min(10)].join("\n")
    );
}
