//! A multipart/form-data body as libmodsecurity 3.0.9 reads it (multipart.cc).
//!
//! Not built yet: [`parse`] gives no parts, no flags and no error, so a multipart body
//! gives none of its ARGS_POST, FILES*, MULTIPART_* values and REQBODY_ERROR is "0". What
//! it is to return is laid out in [`Multipart`], which `RequestData::body` already stores.

/// One file part.
#[derive(Debug, Clone)]
pub(super) struct File {
    /// Its `name` (FILES' and FILES_NAMES' key).
    pub(super) name: Vec<u8>,
    /// Its `filename` (FILES' value).
    pub(super) filename: Vec<u8>,
    /// Its content's length (FILES_SIZES).
    pub(super) size: usize,
}

/// What a multipart body gives.
#[derive(Debug, Clone, Default)]
pub(super) struct Multipart {
    /// Form fields, in body order (ARGS_POST).
    pub(super) args: Vec<(Vec<u8>, Vec<u8>)>,
    /// File parts, in body order.
    pub(super) files: Vec<File>,
    /// `(part name, header line)` for MULTIPART_PART_HEADERS.
    pub(super) part_headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// FILES_COMBINED_SIZE, where libmodsecurity sets it.
    pub(super) files_combined_size: Option<usize>,
    /// MULTIPART_STRICT_ERROR ("0"/"1"; empty where not set).
    pub(super) strict_error: &'static [u8],
    /// MULTIPART_UNMATCHED_BOUNDARY.
    pub(super) unmatched_boundary: &'static [u8],
    /// The body's length without its files (against `SecRequestBodyNoFilesLimit`).
    pub(super) no_files_length: u64,
    /// The parse error, as libmodsecurity writes it after "Multipart parsing error: ".
    pub(super) error: Option<String>,
}

/// `body` with the boundary `content_type` names.
pub(super) fn parse(_content_type: &[u8], _body: &[u8]) -> Multipart {
    Multipart::default()
}
