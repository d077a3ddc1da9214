//! Measures what compressing a byte costs inline, once per encoding (codec, level, gzip
//! backend, dictionary) per process, when a configuration that uses it is loaded (off the
//! event loop): the fastest of a few runs over 64 KiB of generated HTML-like text. A real
//! body compresses faster or slower than that text; the figure is an estimate, labelled as
//! such where it is shown. The figures live in `cost`.

use crate::codec::Encoding;
use crate::cost;
use crate::encoder::BodyEncoder;
use crate::job::compress_chunk;
use std::time::Instant;

const RUNS: usize = 3;
const SAMPLE: usize = 64 * 1024;

/// Measures `encoding` unless it is known already.
pub fn calibrate(encoding: Encoding) {
    if cost::per_byte_ns(&encoding).is_some() {
        return;
    }
    let sample = bytes::Bytes::from(sample_text());
    let mut best = f64::INFINITY;
    for _ in 0..RUNS {
        let job = BodyEncoder::new(encoding).job(sample.clone(), true);
        let start = Instant::now();
        if compress_chunk(&job, "calibration").is_err() {
            return;
        }
        best = best.min(start.elapsed().as_nanos() as f64 / SAMPLE as f64);
    }
    cost::record(&encoding, best);
}

/// HTML-like text: repeated markup with words and numbers that vary, so it compresses
/// about as a page does (3-6x), not as a run of one byte would.
fn sample_text() -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "gateway",
        "offload",
        "handshake",
        "upstream",
        "listener",
        "route",
        "latency",
        "certificate",
        "compression",
        "balancer",
        "request",
        "response",
        "header",
        "engine",
        "session",
        "server",
    ];
    let mut out = Vec::with_capacity(SAMPLE + 256);
    let mut x: u32 = 0x9e37_79b9;
    let mut i = 0u32;
    while out.len() < SAMPLE {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let (a, b) = (WORDS[(x % 16) as usize], WORDS[((x >> 8) % 16) as usize]);
        out.extend_from_slice(
            format!(
                "<li class=\"{a}\"><a href=\"/{b}/{}\">{a} {b} #{i}</a></li>\n",
                x % 9973
            )
            .as_bytes(),
        );
        i += 1;
    }
    out.truncate(SAMPLE);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Codec, GzipBackend};
    use crate::cost::per_byte_ns;

    #[test]
    fn an_encoding_is_measured_once_and_its_chunks_report_cost_by_length() {
        let e = Encoding {
            codec: Codec::Zstd,
            level: 2,
            backend: GzipBackend::ZlibRs,
            dictionary: false,
        };
        let mut enc = BodyEncoder::new(e);
        let job = enc.job(bytes::Bytes::from(vec![b'a'; 10_000]), false);
        use sluice_offload::Job as _;
        assert_eq!(job.inline_cost(), None, "not measured yet");
        calibrate(e);
        let per_byte = per_byte_ns(&e).expect("measured");
        assert!(per_byte > 0.0);
        let cost = job.inline_cost().expect("the encoding was measured");
        assert_eq!(cost.as_nanos(), (per_byte * 10_000.0) as u128);
        calibrate(e);
        assert_eq!(per_byte_ns(&e), Some(per_byte), "measured once");
    }

    #[test]
    fn the_sample_compresses_like_text() {
        let s = sample_text();
        assert_eq!(s.len(), SAMPLE);
        let z = zstd::bulk::compress(&s, 3).unwrap();
        let ratio = s.len() as f64 / z.len() as f64;
        assert!((2.0..20.0).contains(&ratio), "ratio {ratio}");
    }
}
