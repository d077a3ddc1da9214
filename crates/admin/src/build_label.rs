//! What this build calls itself beside its version: `/status` and the dashboard show
//! `build`, so that after a binary upgrade an operator (or a test) sees which binary serves.
//!
//! The label sits in the binary as a fixed-size byte string after a marker, `SLUICE_BUILD`
//! at compile time (a package build sets it; "source" otherwise), so that a packager can also
//! stamp an already built binary by rewriting the bytes after the marker in place, as the
//! binary-upgrade test does to make a second binary that differs without a second build.

/// The marker before the label; the label runs to the first NUL or the end of the slot.
pub const MARKER: &[u8] = b"sluice-build-label:";

/// Bytes for the label after the marker.
pub const LABEL_LEN: usize = 48;

const fn slot() -> [u8; MARKER.len() + LABEL_LEN] {
    let label = match option_env!("SLUICE_BUILD") {
        Some(l) => l.as_bytes(),
        None => b"source",
    };
    let mut out = [0u8; MARKER.len() + LABEL_LEN];
    let mut i = 0;
    while i < MARKER.len() {
        out[i] = MARKER[i];
        i += 1;
    }
    let mut j = 0;
    while j < label.len() && j < LABEL_LEN {
        out[MARKER.len() + j] = label[j];
        j += 1;
    }
    out
}

/// Kept in the binary as it is, so that a stamped label is what `label` reads.
#[used]
static SLOT: [u8; MARKER.len() + LABEL_LEN] = slot();

/// The label: the bytes after the marker up to the first NUL ("source" for a plain build).
pub fn label() -> String {
    // Read through an opaque pointer: the compiler must load the bytes from the binary, not
    // fold the initializer's value in, or a stamped label would never be seen.
    let slot: &[u8] = std::hint::black_box(&SLOT[..]);
    let label = &slot[MARKER.len()..];
    let end = label.iter().position(|&b| b == 0).unwrap_or(label.len());
    String::from_utf8_lossy(&label[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_plain_build_calls_itself_what_it_was_built_as() {
        let want = option_env!("SLUICE_BUILD").unwrap_or("source");
        assert_eq!(super::label(), want);
    }
}
