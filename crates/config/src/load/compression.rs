//! `[compression]` and `[route.compression]`: a route's compression settings over the defaults.

use super::Cx;
use crate::compression::*;
use crate::raw::*;
use std::ops::RangeInclusive;
use std::sync::Arc;
use toml::Spanned;

impl Cx<'_> {
    /// `base` with the settings of `raw` applied; errors are reported and leave the base
    /// value in place.
    pub(super) fn compression(
        &mut self,
        base: &Compression,
        raw: Option<&RawCompression>,
        section: &str,
    ) -> Arc<Compression> {
        let mut c = base.clone();
        let Some(raw) = raw else {
            return Arc::new(c);
        };
        if let Some(e) = raw.enabled {
            c.enabled = e;
        }
        if let Some(list) = &raw.codecs {
            c.codecs = self.codecs(section, list);
        }
        if let Some(b) = self.choice(
            raw.gzip_backend.as_ref(),
            "gzip_backend",
            &[
                ("isal", GzipBackend::Isal),
                ("zlib-rs", GzipBackend::ZlibRs),
            ],
        ) {
            c.gzip_backend = b;
        }
        self.codec_levels(section, raw, &mut c);
        if let Some(n) = self.size(raw.min_length.as_ref()) {
            c.min_length = n;
        }
        if let Some(list) = &raw.types {
            c.types = self.compressed_types(section, list);
        }
        if let Some(n) = self.size(raw.chunk_size.as_ref()) {
            if (4096..=(16 << 20)).contains(&n) {
                c.chunk_size = n as usize;
            } else if let Some(v) = &raw.chunk_size {
                self.err_at(
                    v,
                    format!("{section} chunk_size must be between 4k and 16m"),
                    "use a size such as \"64k\" (smaller chunks flush sooner, larger ones compress better)",
                );
            }
        }
        if let Some(n) = self.size(raw.sw_threshold.as_ref()) {
            c.sw_threshold = Some(n);
        }
        if let Some(d) = raw.dictionary {
            c.dictionary = d;
        }
        if let Some(d) = raw.decompress_requests {
            c.decompress_requests = d;
        }
        if let Some(n) = self.size(raw.max_decompressed_bytes.as_ref()) {
            c.max_decompressed_bytes = n;
        }
        Arc::new(c)
    }

    /// `codecs`: the codings Sluice produces, in order of preference; at least one.
    fn codecs(&mut self, section: &str, list: &Spanned<Vec<String>>) -> Vec<ContentCoding> {
        let mut codecs = Vec::new();
        for name in list.get_ref() {
            match name.as_str() {
                "gzip" => codecs.push(ContentCoding::Gzip),
                "br" => codecs.push(ContentCoding::Brotli),
                "zstd" => codecs.push(ContentCoding::Zstd),
                other => self.err_at(
                    list,
                    format!("{section} codecs names \"{other}\", which Sluice does not produce"),
                    "use \"zstd\", \"br\" and/or \"gzip\", in your order of preference",
                ),
            }
        }
        if codecs.is_empty() && list.get_ref().is_empty() {
            self.err_at(
                list,
                format!("{section} codecs is empty"),
                "name at least one of \"zstd\", \"br\", \"gzip\", or set enabled = false",
            );
        }
        codecs
    }

    /// `gzip_level` on the scale of `c`'s gzip backend (a level inherited from the base is
    /// brought onto it), `brotli_level` and `zstd_level`.
    fn codec_levels(&mut self, section: &str, raw: &RawCompression, c: &mut Compression) {
        let gzip_range = match c.gzip_backend {
            GzipBackend::Isal => 0..=3,
            GzipBackend::ZlibRs => 1..=9,
        };
        match (raw.gzip_level.as_ref(), c.gzip_backend) {
            (Some(v), b) => {
                let help = if b == GzipBackend::Isal {
                    "ISA-L has levels 0-3 (1 is about zlib's 1 in size, several times faster); use gzip_backend = \"zlib-rs\" for levels 1-9"
                } else {
                    "zlib levels are 1 (fastest) to 9 (smallest)"
                };
                if let Some(l) = self.codec_level(section, Some(v), "gzip_level", gzip_range, help)
                {
                    c.gzip_level = l;
                }
            }
            // A level inherited from a zlib-rs base does not fit ISA-L's scale: clamp.
            (None, GzipBackend::Isal) => c.gzip_level = c.gzip_level.min(3),
            (None, GzipBackend::ZlibRs) => c.gzip_level = c.gzip_level.max(1),
        }
        if let Some(l) = self.codec_level(
            section,
            raw.brotli_level.as_ref(),
            "brotli_level",
            0..=11,
            "brotli qualities are 0 to 11; 4-5 suit dynamic responses",
        ) {
            c.brotli_level = l;
        }
        if let Some(l) = self.codec_level(
            section,
            raw.zstd_level.as_ref(),
            "zstd_level",
            1..=19,
            "zstd levels are 1 to 19; 3 is zstd's default",
        ) {
            c.zstd_level = l;
        }
    }

    /// One codec's level `key`, if given and within `range`.
    fn codec_level(
        &mut self,
        section: &str,
        v: Option<&Spanned<u32>>,
        key: &str,
        range: RangeInclusive<u32>,
        help: &str,
    ) -> Option<u32> {
        let v = v?;
        if !range.contains(v.get_ref()) {
            self.err_at(
                v,
                format!(
                    "{section} {key} = {} is out of range {}-{}",
                    v.get_ref(),
                    range.start(),
                    range.end()
                ),
                help.to_owned(),
            );
            return None;
        }
        Some(*v.get_ref())
    }

    /// `types`: the MIME types compressed (`text/*` and `*` allowed), lower-cased; a
    /// mistaken one is reported and left out.
    fn compressed_types(&mut self, section: &str, list: &Spanned<Vec<String>>) -> Vec<String> {
        let mut types = Vec::new();
        for t in list.get_ref() {
            let t = t.trim().to_ascii_lowercase();
            if t != "*" && !t.contains('/') {
                self.err_at(
                    list,
                    format!("{section} types has `{t}`, which is not a MIME type"),
                    "write types as \"text/html\", \"text/*\", \"application/*+json\" or \"*\"",
                );
                continue;
            }
            types.push(t);
        }
        types
    }
}
