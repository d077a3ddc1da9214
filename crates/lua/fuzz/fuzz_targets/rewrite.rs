//! The instruction budget's source rewrite (`sluice_lua::fuzzing::check_rewrite`) on any
//! text: no panic, every line kept, and what compiled as it was compiles with its polls.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice_lua::fuzzing::check_rewrite(data);
});
