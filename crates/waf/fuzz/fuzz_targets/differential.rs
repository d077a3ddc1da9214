//! The native engine beside libmodsecurity on arbitrary requests (`sluice_waf::fuzzing`): a
//! difference in the rules that matched or in the intervention, or a panic in the native
//! engine, is a crash. `cd crates/waf/fuzz && cargo +nightly fuzz run differential`
//! (Debian's CRS 3.3.4 by default; `SLUICE_FUZZ_CRS=dir` for another).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_waf::fuzzing::Differential;
use std::sync::OnceLock;

static ENGINES: OnceLock<Differential> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    ENGINES.get_or_init(Differential::new).run(data);
});
