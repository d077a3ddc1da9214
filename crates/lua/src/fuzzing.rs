//! The `ngx` API driven with arbitrary arguments in a live state: what `crates/lua/fuzz`'s
//! `api` target runs on libFuzzer's inputs, and the crate's tests on a fixed seed. An input
//! is a program: each call picks an API function and its arguments (every Lua type, NaN,
//! ±inf, huge and negative numbers, long and binary strings, tables with metatables that
//! raise) and runs under `pcall`; whatever the calls do, the state must then serve a probe
//! request. A panic that escapes, an abort, or a probe that fails is the fuzzer's crash.
//!
//! [`check_rewrite`] is the `rewrite` target's: the budget's source rewrite on any text.

use crate::{Facts, LuaRuntime, Outcome, RequestHead, Started};
use http::Request;
use sluice_config::LuaPhase;
use std::sync::Arc;

/// The most input bytes one program reads (longer inputs are cut).
pub const MAX_INPUT: usize = 4096;

/// The program's interpreter: reads its bytes from `?p=` (hex), calls the API with them.
const DRIVER: &str = include_str!("fuzzing.lua");

/// A runtime with the driver's route and the probe's.
pub struct Driver {
    rt: Arc<LuaRuntime>,
}

impl Default for Driver {
    fn default() -> Self {
        Self::new()
    }
}

impl Driver {
    /// The runtime: a 16 MiB state with a 1 MiB dictionary, the default instruction budget.
    pub fn new() -> Self {
        let text = format!(
            "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:0\"\n\
             [[upstream]]\nname = \"u\"\nservers = [{{ address = \"127.0.0.1:9\" }}]\n\
             [lua]\nmax_memory = \"16m\"\nshared_dicts = {{ fuzz = \"1m\" }}\n\
             [[route]]\nname = \"fuzz\"\nupstream = \"u\"\n[route.lua]\naccess = '''\n{DRIVER}\n'''\n\
             [[route]]\nname = \"probe\"\nupstream = \"u\"\n[route.lua]\naccess = '''\n{PROBE}\n'''\n"
        );
        let s = sluice_config::load_str(&text, "fuzz.toml", std::path::Path::new("."))
            .unwrap_or_else(|e| panic!("{e}"));
        let rt = LuaRuntime::build(&s.lua, &s.routes, None)
            .unwrap_or_else(|e| panic!("{e}"))
            .expect("the driver's routes have scripts");
        Driver { rt }
    }

    /// Runs `input` as a program, then the probe; panics if the state does not serve it.
    pub fn run(&self, input: &[u8]) {
        let input = &input[..input.len().min(MAX_INPUT)];
        let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
        // Whatever the program's call comes to (a 500, a response, a wait dropped) is fine.
        drop(self.call("fuzz", &format!("/?p={hex}")));
        let (started, req) = self.call("probe", "/");
        match started {
            Started::Done(Outcome::Continue) => {}
            Started::Done(other) => panic!("the probe after {hex} got {other:?}"),
            Started::Waiting(_) => panic!("the probe after {hex} waits"),
        }
        assert_eq!(req.headers()["x-probe"], "1", "after {hex}");
    }

    fn call(&self, route: &str, uri: &str) -> (Started, Request<()>) {
        let lua = self
            .rt
            .scripts(route)
            .expect("the driver's route")
            .request(facts());
        let mut req = Request::get(uri).body(()).expect("a valid test URI");
        let started = lua.start_request(
            LuaPhase::Access,
            &mut RequestHead {
                request: &mut req,
                body: None,
                subject: None,
            },
        );
        (started, req)
    }
}

/// The budget's polls put into `source` (any bytes, as a script or `load` may hand over):
/// panics unless the rewrite keeps every line where it was and, where `source` compiles as it
/// is, compiles too (short of LuaJIT's limits, which one more function level or two more
/// upvalues can cross: the state then runs the chunk as it is, with the compiler off).
pub fn check_rewrite(source: &[u8]) {
    let Some(out) = crate::budget::rewrite::instrument(source) else {
        return;
    };
    let lines = |b: &[u8]| b.iter().filter(|&&c| c == b'\n').count();
    assert_eq!(lines(&out), lines(source) + 1, "the rewrite moved lines");
    thread_local! {
        static LUA: mlua::Lua = mlua::Lua::new();
    }
    LUA.with(|lua| {
        let compiles = |text: &[u8]| {
            lua.load(text)
                .set_mode(mlua::chunk::ChunkMode::Text)
                .into_function()
                .map(drop)
        };
        if compiles(source).is_ok()
            && let Err(e) = compiles(&out)
        {
            let e = e.to_string();
            let limit = [
                "upvalues",
                "syntax levels",
                "more than",
                "too many",
                "overflow",
            ];
            assert!(
                limit.iter().any(|l| e.contains(l)),
                "compiles as it is, not rewritten: {e}\n{}",
                String::from_utf8_lossy(&out)
            );
        }
        lua.gc_collect().ok();
    });
}

/// What the probe checks: a dictionary, a header, a pure function, memory for a table.
const PROBE: &str = r#"
local d = ngx.shared.fuzz
assert(d:set("probe", "v", 10))
assert(d:get("probe") == "v")
assert(ngx.http_time(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
local t = {} for i = 1, 1000 do t[i] = i end
ngx.req.set_header("X-Probe", "1")
"#;

fn facts() -> Facts {
    Facts {
        route: "fuzz".into(),
        client: std::net::SocketAddr::from(([192, 0, 2, 7], 4567)),
        local: std::net::SocketAddr::from(([127, 0, 0, 1], 8443)),
        scheme: "https",
        request_id: None,
        request_uri: None,
        arrived: std::time::Instant::now(),
    }
}
