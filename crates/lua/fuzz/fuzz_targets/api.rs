//! The `ngx` API called with arbitrary arguments in a live LuaJIT state
//! (`sluice_lua::fuzzing`): no input may panic past the API, abort the process, or leave
//! the state unable to serve the next request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_lua::fuzzing::Driver;
use std::sync::OnceLock;

static DRIVER: OnceLock<Driver> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    DRIVER.get_or_init(Driver::new).run(data);
});
