mod decoder;
mod encoder;
pub(crate) mod header;
pub(crate) mod huffman;
// Sluice: the encoder looks fields up in the static table only (`Table::index_static_only`);
// the dynamic table's indexing is kept, unused, so that a return to it is a one-line change
// and the diff against h2 as published stays small.
#[allow(dead_code)]
mod table;

#[cfg(test)]
mod test;

pub use self::decoder::{Decoder, DecoderError, NeedMore};
pub use self::encoder::Encoder;
pub use self::header::{BytesStr, Header};
