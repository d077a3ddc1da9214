//! `Accept-Encoding` negotiation (RFC 9110 §12.5.3).

use crate::Codec;

/// Picks the codec to use for a request's `Accept-Encoding`, among `offered` in the
/// server's order of preference: the acceptable codec with the highest q-value, ties going
/// to the server's order. `*` covers codings not named; `q=0` refuses. `None`: send the
/// body as it is (identity), also when the client refused identity and nothing else is
/// acceptable (sending identity beats a 406 for a gateway).
pub fn negotiate(accept_encoding: Option<&str>, offered: &[Codec]) -> Option<Codec> {
    let header = accept_encoding?;
    let mut named: Vec<(String, f32)> = Vec::new();
    for item in header.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        if coding.is_empty() {
            continue;
        }
        let mut q = 1.0f32;
        for p in parts {
            let p = p.trim();
            if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                q = v.trim().parse::<f32>().unwrap_or(0.0).clamp(0.0, 1.0);
            }
        }
        named.push((coding, q));
    }
    let q_of = |codec: Codec| -> f32 {
        let aliases: &[&str] = match codec {
            Codec::Gzip => &["gzip", "x-gzip"],
            Codec::Brotli => &["br"],
            Codec::Zstd => &["zstd"],
        };
        named
            .iter()
            .filter(|(c, _)| aliases.contains(&c.as_str()))
            .map(|(_, q)| *q)
            .reduce(f32::max)
            .or_else(|| named.iter().find(|(c, _)| c == "*").map(|(_, q)| *q))
            .unwrap_or(0.0)
    };
    let mut best: Option<(Codec, f32)> = None;
    for &codec in offered {
        let q = q_of(codec);
        if q > 0.0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((codec, q));
        }
    }
    best.map(|(c, _)| c)
}
