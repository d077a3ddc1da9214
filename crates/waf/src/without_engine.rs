//! libmodsecurity's place in a build without the `modsecurity` feature: the native engine
//! still compiles and inspects; a rule set with `engine = "modsecurity"` cannot be compiled,
//! and a configuration that asks for one is refused with what to do.

use crate::rules::Piece;

/// A compiled libmodsecurity rule set: none can exist in this build.
#[derive(Debug)]
pub struct Rules(pub(crate) std::convert::Infallible);

impl Rules {
    /// Refuses: this build has no libmodsecurity.
    pub fn build(_pieces: &[Piece]) -> Result<Rules, String> {
        Err(
            "this Sluice was built without libmodsecurity: use the native engine (leave out \
             `engine`), or build Sluice with the default features (cargo feature `waf`), after \
             scripts/deps has installed libmodsecurity-dev"
                .to_string(),
        )
    }
}

/// The engine's version line: none.
pub fn version() -> String {
    "none (built without the `modsecurity` feature)".to_string()
}

/// A transaction: none can exist in this build.
#[derive(Debug)]
pub(crate) struct Transaction(pub(crate) std::convert::Infallible);
