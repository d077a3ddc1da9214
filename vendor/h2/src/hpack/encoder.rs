use super::table::{static_field_index, Index, Table};
use super::Header;

use bytes::{BufMut, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

const DEFAULT_MAX_ALLOWED_SIZE: usize = 4 * 1024;

#[derive(Debug)]
pub struct Encoder {
    table: Table,
    max_allowed_size: usize,
    size_update: Option<SizeUpdate>,
    /// Reusable buffer for the encoded header block of a single frame.
    ///
    /// A header block only has to live until it is copied into the
    /// connection write buffer, so the buffer that holds it can be reused
    /// across frames instead of being allocated and freed per frame. See
    /// `take_scratch` / `return_scratch`.
    scratch: BytesMut,
}

#[derive(Debug, Copy, Clone, Eq, PartialEq)]
enum SizeUpdate {
    One(usize),
    Two(usize, usize), // min, max
}

impl Encoder {
    pub fn new(max_size: usize, capacity: usize) -> Encoder {
        let max_size = max_size.min(DEFAULT_MAX_ALLOWED_SIZE);

        Encoder {
            table: Table::new(max_size, capacity),
            max_allowed_size: DEFAULT_MAX_ALLOWED_SIZE,
            size_update: None,
            scratch: BytesMut::new(),
        }
    }

    #[cfg(test)]
    fn set_max_allowed_size(&mut self, max: usize) {
        self.max_allowed_size = max;

        if self.table.max_size() > max {
            self.update_max_size(max);
        }
    }

    /// Takes the reusable buffer for one header-block encode.
    ///
    /// The buffer is returned by `return_scratch` once the encoded block has
    /// been copied into the write buffer. If it is not returned - the
    /// CONTINUATION path keeps it, since the remainder is still needed - the
    /// next call simply starts from a fresh buffer.
    pub(crate) fn take_scratch(&mut self) -> BytesMut {
        std::mem::take(&mut self.scratch)
    }

    /// Returns a fully-written header block buffer for reuse.
    pub(crate) fn return_scratch(&mut self, scratch: BytesMut) {
        self.scratch = scratch;
    }

    /// Queues a max size update.
    ///
    /// The next call to `encode` will include a dynamic size update frame.
    pub fn update_max_size(&mut self, val: usize) {
        let val = val.min(self.max_allowed_size);

        match self.size_update {
            Some(SizeUpdate::One(old)) => {
                if val > old {
                    if old > self.table.max_size() {
                        self.size_update = Some(SizeUpdate::One(val));
                    } else {
                        self.size_update = Some(SizeUpdate::Two(old, val));
                    }
                } else {
                    self.size_update = Some(SizeUpdate::One(val));
                }
            }
            Some(SizeUpdate::Two(min, _)) => {
                if val < min {
                    self.size_update = Some(SizeUpdate::One(val));
                } else {
                    self.size_update = Some(SizeUpdate::Two(min, val));
                }
            }
            None => {
                if val != self.table.max_size() {
                    // Don't bother writing a frame if the value already matches
                    // the table's max size.
                    self.size_update = Some(SizeUpdate::One(val));
                }
            }
        }
    }

    /// Encode a set of headers into the provide buffer
    pub fn encode<I>(&mut self, headers: I, dst: &mut BytesMut)
    where
        I: IntoIterator<Item = Header<Option<HeaderName>>>,
    {
        let span = tracing::trace_span!("hpack::encode");
        let _e = span.enter();

        self.encode_size_updates(dst);

        let mut last_index = None;

        for header in headers {
            match header.reify() {
                // The header has an associated name. In which case, try to
                // index it in the table.
                Ok(header) => {
                    // Sluice: names from the static table, values as literals never
                    // inserted into the dynamic table (what NGINX and HAProxy send). h2
                    // indexed every field: hashing, probing and comparing each one cost
                    // ~4,000 instructions per response head, and the table kept copies
                    // of the values for the connection's whole life.
                    let index = self.table.index_static_only(header);
                    self.encode_header(&index, dst);

                    last_index = Some(index);
                }
                // The header does not have an associated name. This means that
                // the name is the same as the previously yielded header. In
                // which case, we skip table lookup and just use the same index
                // as the previous entry.
                Err(value) => {
                    self.encode_header_without_name(
                        last_index.as_ref().unwrap_or_else(|| {
                            panic!("encoding header without name, but no previous index to use for name");
                        }),
                        &value,
                        dst,
                    );
                }
            }
        }
    }

    /// Encodes a header block: the pseudo-header fields, then `fields` by reference.
    ///
    /// Sluice: the fields are encoded as `encode` encodes them (static-table names,
    /// literal values never inserted) without moving each out of its map into a
    /// `Header` and an `Index`: that plumbing cost ~180 instructions a field.
    pub fn encode_block<I>(&mut self, pseudo: I, fields: &HeaderMap, dst: &mut BytesMut)
    where
        I: IntoIterator<Item = Header<Option<HeaderName>>>,
    {
        self.encode(pseudo, dst);

        for (name, value) in fields {
            let sensitive = value.is_sensitive();
            match static_field_index(name, value) {
                Some((idx, true)) => encode_int(idx, 7, 0x80, dst),
                Some((idx, false)) => encode_not_indexed(idx, value.as_bytes(), sensitive, dst),
                None => {
                    encode_not_indexed2(name.as_str().as_bytes(), value.as_bytes(), sensitive, dst)
                }
            }
        }
    }

    fn encode_size_updates(&mut self, dst: &mut BytesMut) {
        match self.size_update.take() {
            Some(SizeUpdate::One(val)) => {
                self.table.resize(val);
                encode_size_update(val, dst);
            }
            Some(SizeUpdate::Two(min, max)) => {
                self.table.resize(min);
                self.table.resize(max);
                encode_size_update(min, dst);
                encode_size_update(max, dst);
            }
            None => {}
        }
    }

    fn encode_header(&mut self, index: &Index, dst: &mut BytesMut) {
        match *index {
            Index::Indexed(idx, _) => {
                encode_int(idx, 7, 0x80, dst);
            }
            Index::Name(idx, _) => {
                let header = self.table.resolve(index);

                encode_not_indexed(idx, header.value_slice(), header.is_sensitive(), dst);
            }
            Index::Inserted(_) => {
                let header = self.table.resolve(index);

                assert!(!header.is_sensitive());

                dst.put_u8(0b0100_0000);

                encode_str(header.name().as_slice(), dst);
                encode_str(header.value_slice(), dst);
            }
            Index::InsertedValue(idx, _) => {
                let header = self.table.resolve(index);

                assert!(!header.is_sensitive());

                encode_int(idx, 6, 0b0100_0000, dst);
                encode_str(header.value_slice(), dst);
            }
            Index::NotIndexed(_) => {
                let header = self.table.resolve(index);

                encode_not_indexed2(
                    header.name().as_slice(),
                    header.value_slice(),
                    header.is_sensitive(),
                    dst,
                );
            }
        }
    }

    fn encode_header_without_name(
        &mut self,
        last: &Index,
        value: &HeaderValue,
        dst: &mut BytesMut,
    ) {
        match *last {
            Index::Indexed(..)
            | Index::Name(..)
            | Index::Inserted(..)
            | Index::InsertedValue(..) => {
                let idx = self.table.resolve_idx(last);

                encode_not_indexed(idx, value.as_ref(), value.is_sensitive(), dst);
            }
            Index::NotIndexed(_) => {
                let last = self.table.resolve(last);

                encode_not_indexed2(
                    last.name().as_slice(),
                    value.as_ref(),
                    value.is_sensitive(),
                    dst,
                );
            }
        }
    }
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new(4096, 0)
    }
}

fn encode_size_update(val: usize, dst: &mut BytesMut) {
    encode_int(val, 5, 0b0010_0000, dst)
}

fn encode_not_indexed(name: usize, value: &[u8], sensitive: bool, dst: &mut BytesMut) {
    if sensitive {
        encode_int(name, 4, 0b10000, dst);
    } else {
        encode_int(name, 4, 0, dst);
    }

    encode_str(value, dst);
}

fn encode_not_indexed2(name: &[u8], value: &[u8], sensitive: bool, dst: &mut BytesMut) {
    if sensitive {
        dst.put_u8(0b10000);
    } else {
        dst.put_u8(0);
    }

    encode_str(name, dst);
    encode_str(value, dst);
}

fn encode_str(val: &[u8], dst: &mut BytesMut) {
    // Sluice: string literals are sent raw (H = 0), as HAProxy sends them.
    encode_int(val.len(), 7, 0, dst);
    dst.extend_from_slice(val);
}

/// Encode an integer into the given destination buffer
fn encode_int<B: BufMut>(
    mut value: usize,   // The integer to encode
    prefix_bits: usize, // The number of bits in the prefix
    first_byte: u8,     // The base upon which to start encoding the int
    dst: &mut B,
) {
    if encode_int_one_byte(value, prefix_bits) {
        dst.put_u8(first_byte | value as u8);
        return;
    }

    let low = (1 << prefix_bits) - 1;

    value -= low;

    dst.put_u8(first_byte | low as u8);

    while value >= 128 {
        dst.put_u8(0b1000_0000 | value as u8);

        value >>= 7;
    }

    dst.put_u8(value as u8);
}

/// Returns true if the in the int can be fully encoded in the first byte.
fn encode_int_one_byte(value: usize, prefix_bits: usize) -> bool {
    value < (1 << prefix_bits) - 1
}

#[cfg(test)]
mod test {
    // Sluice: the encoder sends static-table names and raw literal values that are never
    // inserted into the dynamic table (see `Encoder::encode`); h2's tests of dynamic
    // indexing, eviction and Huffman-coded output were replaced by these. Run them with
    // `cargo test --lib` in vendor/h2.
    use super::*;
    use crate::hpack::Decoder;
    use http::*;
    use std::io::Cursor;

    #[test]
    fn fully_matched_static_fields_are_one_byte() {
        let mut encoder = Encoder::default();
        assert_eq!(*encode(&mut encoder, vec![method("GET")]), [0x80 | 2]);
        assert_eq!(*encode(&mut encoder, vec![method("POST")]), [0x80 | 3]);
        assert_eq!(
            *encode(&mut encoder, vec![Header::Status(StatusCode::OK)]),
            [0x80 | 8]
        );
        assert_eq!(
            *encode(&mut encoder, vec![Header::Status(StatusCode::NOT_FOUND)]),
            [0x80 | 13]
        );
        assert_eq!(encoder.table.len(), 0);
    }

    #[test]
    fn static_names_with_raw_values_never_indexed() {
        let mut encoder = Encoder::default();
        // :method PATCH: name 2, four-bit prefix, literal without indexing.
        let patch = [&[0x02, 5][..], b"PATCH"].concat();
        assert_eq!(*encode(&mut encoder, vec![method("PATCH")]), *patch);
        // Repeated, it is sent the same way: nothing went into the dynamic table.
        assert_eq!(*encode(&mut encoder, vec![method("PATCH")]), *patch);
        // content-language (27) needs a second byte in a four-bit prefix: 15 + 12.
        let res = encode(&mut encoder, vec![header("content-language", "foo")]);
        assert_eq!(*res, [&[0x0f, 12, 3][..], b"foo"].concat());
        // :status 418 is name 8 with its value.
        let res = encode(&mut encoder, vec![Header::Status(StatusCode::IM_A_TEAPOT)]);
        assert_eq!(*res, [&[0x08, 3][..], b"418"].concat());
        assert_eq!(encoder.table.len(), 0);
    }

    #[test]
    fn unknown_names_are_literal_and_repeat_literally() {
        let mut encoder = Encoder::default();
        let expected = [&[0x00, 3][..], b"foo", &[5], b"hello"].concat();
        for _ in 0..3 {
            assert_eq!(
                *encode(&mut encoder, vec![header("foo", "hello")]),
                *expected
            );
        }
        assert_eq!(encoder.table.len(), 0);
    }

    #[test]
    fn sensitive_values_are_never_indexed_literals() {
        let mut encoder = Encoder::default();
        let mut value = HeaderValue::from_static("secret");
        value.set_sensitive(true);
        let res = encode(
            &mut encoder,
            vec![
                Header::Field {
                    name: Some(header::AUTHORIZATION),
                    value: value.clone(),
                },
                Header::Field {
                    name: Some(HeaderName::from_static("x-token")),
                    value,
                },
            ],
        );
        // authorization is name 23: 0b0001 prefix, 15 + 8.
        let expected = [
            &[0x1f, 8, 6][..],
            b"secret",
            &[0x10, 7],
            b"x-token",
            &[6],
            b"secret",
        ]
        .concat();
        assert_eq!(*res, *expected);
    }

    #[test]
    fn long_values_take_a_multi_byte_length() {
        let mut encoder = Encoder::default();
        let long = "a".repeat(200);
        let res = encode(&mut encoder, vec![header("x-long", &long)]);
        // 6 for the name, then 200 = 127 + 73 in a seven-bit prefix.
        assert_eq!(
            &res[..10],
            &[&[0x00, 6][..], b"x-long", &[0x7f, 73]].concat()[..]
        );
        assert_eq!(&res[10..], long.as_bytes());
        let res = encode(&mut encoder, vec![header("x-empty", "")]);
        assert_eq!(*res, [&[0x00, 7][..], b"x-empty", &[0]].concat());
    }

    #[test]
    fn a_nameless_field_reuses_the_previous_name() {
        let mut encoder = Encoder::default();
        let res = encode(
            &mut encoder,
            vec![
                header("hello", "world"),
                Header::Field {
                    name: None,
                    value: HeaderValue::from_static("zomg"),
                },
                header("accept-ranges", "bytes"),
                Header::Field {
                    name: None,
                    value: HeaderValue::from_static("none"),
                },
            ],
        );
        let expected = [
            &[0x00, 5][..],
            b"hello",
            &[5],
            b"world",
            &[0x00, 5],
            b"hello",
            &[4],
            b"zomg",
            &[0x0f, 3, 5],
            b"bytes",
            &[0x0f, 3, 4],
            b"none",
        ]
        .concat();
        assert_eq!(*res, *expected);
    }

    #[test]
    fn size_updates_still_lead_the_next_block() {
        let mut encoder = Encoder::default();
        encoder.update_max_size(0);
        assert_eq!(*encode(&mut encoder, vec![method("GET")]), [0x20, 0x80 | 2]);
        assert_eq!(*encode(&mut encoder, vec![method("GET")]), [0x80 | 2]);
        let mut encoder = Encoder::default();
        encoder.update_max_size(0);
        encoder.update_max_size(100);
        // min then max, five-bit prefix: 100 = 31 + 69.
        assert_eq!(
            *encode(&mut encoder, vec![method("GET")]),
            [0x20, 0x3f, 69, 0x80 | 2]
        );
    }

    #[test]
    fn encode_block_matches_encode_and_decodes_back() {
        let mut fields = HeaderMap::new();
        fields.append(header::SERVER, HeaderValue::from_static("nginx"));
        fields.append(header::SET_COOKIE, HeaderValue::from_static("a=1"));
        fields.append(header::SET_COOKIE, HeaderValue::from_static("b=2"));
        fields.append("x-request-id", HeaderValue::from_static("abc"));
        fields.append("x-multi", HeaderValue::from_static("1"));
        fields.append("x-multi", HeaderValue::from_static("2"));
        let mut secret = HeaderValue::from_static("s");
        secret.set_sensitive(true);
        fields.append(header::AUTHORIZATION, secret);
        fields.append("x-long", HeaderValue::from_str(&"v".repeat(300)).unwrap());
        fields.append(header::CONTENT_LENGTH, HeaderValue::from_static("1024"));

        let mut by_block = BytesMut::new();
        Encoder::default().encode_block(
            vec![Header::Status(StatusCode::OK)],
            &fields,
            &mut by_block,
        );

        let mut headers = vec![Header::Status(StatusCode::OK)];
        headers.extend(
            fields
                .clone()
                .into_iter()
                .map(|(name, value)| Header::Field { name, value }),
        );
        let mut by_encode = BytesMut::new();
        Encoder::default().encode(headers, &mut by_encode);
        assert_eq!(by_block, by_encode);

        let mut decoded = vec![];
        Decoder::new(4096)
            .decode(&mut Cursor::new(&mut by_block), |h| {
                decoded.push(h);
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(decoded[0], Header::Status(StatusCode::OK));
        let back: Vec<(HeaderName, HeaderValue)> = decoded[1..]
            .iter()
            .map(|h| match h {
                Header::Field { name, value } => (name.clone(), value.clone()),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        let sent: Vec<(HeaderName, HeaderValue)> =
            fields.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
        assert_eq!(back, sent);
    }

    #[test]
    fn test_update_max_size_combos() {
        let mut encoder = Encoder::default();
        assert!(encoder.size_update.is_none());
        assert_eq!(4096, encoder.table.max_size());

        encoder.update_max_size(4096); // Default size
        assert!(encoder.size_update.is_none());

        encoder.update_max_size(0);
        assert_eq!(Some(SizeUpdate::One(0)), encoder.size_update);

        encoder.update_max_size(100);
        assert_eq!(Some(SizeUpdate::Two(0, 100)), encoder.size_update);

        let mut encoder = Encoder::default();
        encoder.set_max_allowed_size(8000);
        encoder.update_max_size(8000);
        assert_eq!(Some(SizeUpdate::One(8000)), encoder.size_update);

        encoder.update_max_size(100);
        assert_eq!(Some(SizeUpdate::One(100)), encoder.size_update);

        encoder.update_max_size(8000);
        assert_eq!(Some(SizeUpdate::Two(100, 8000)), encoder.size_update);

        encoder.update_max_size(4000);
        assert_eq!(Some(SizeUpdate::Two(100, 4000)), encoder.size_update);

        encoder.update_max_size(50);
        assert_eq!(Some(SizeUpdate::One(50)), encoder.size_update);
    }

    #[test]
    fn test_large_size_update() {
        let mut encoder = Encoder::default();
        encoder.set_max_allowed_size(usize::MAX);

        encoder.update_max_size(1912930560);
        assert_eq!(Some(SizeUpdate::One(1912930560)), encoder.size_update);

        let mut dst = BytesMut::with_capacity(6);
        encoder.encode_size_updates(&mut dst);
        assert_eq!([63, 225, 129, 148, 144, 7], &dst[..]);
    }

    #[test]
    fn test_large_size_update_is_capped() {
        let mut encoder = Encoder::new(0, 0);

        encoder.update_max_size(1912930560);
        assert_eq!(
            Some(SizeUpdate::One(DEFAULT_MAX_ALLOWED_SIZE)),
            encoder.size_update
        );

        let mut dst = BytesMut::with_capacity(3);
        encoder.encode_size_updates(&mut dst);
        assert_eq!([63, 225, 31], &dst[..]);
        assert_eq!(DEFAULT_MAX_ALLOWED_SIZE, encoder.table.max_size());
    }

    fn encode(e: &mut Encoder, hdrs: Vec<Header<Option<HeaderName>>>) -> BytesMut {
        let mut dst = BytesMut::with_capacity(1024);
        e.encode(hdrs, &mut dst);
        dst
    }

    fn method(s: &str) -> Header<Option<HeaderName>> {
        Header::Method(Method::from_bytes(s.as_bytes()).unwrap())
    }

    fn header(name: &str, val: &str) -> Header<Option<HeaderName>> {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        let value = HeaderValue::from_bytes(val.as_bytes()).unwrap();

        Header::Field {
            name: Some(name),
            value,
        }
    }
}
