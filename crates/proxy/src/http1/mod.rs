//! Sluice's own HTTP/1.1 server side: the client connection's codec and driver.
//!
//! hyper's general-purpose HTTP/1 server kept an 8 KiB read buffer and an 8 KiB write buffer
//! for each connection's whole life and ran every request through its state machine; a
//! gateway needs less, and holds many idle connections. Here (after Pingora's `v1` codec and
//! sozu's buffer pool):
//! - `head`: request heads parsed in place with `httparse`, the target and header values kept
//!   as slices of the read buffer, framing checked at least as strictly as NGINX and HAProxy;
//! - `names`: header names made once per thread as the peers spell them (both sides);
//! - `decode`: Content-Length and chunked bodies decoded from the same buffer without copies;
//! - `response`: the response head encoded into one buffer and sent with the first body bytes;
//! - `buffers`: read buffers from a per-thread free list, held only while a connection has
//!   bytes to parse or a request in flight;
//! - `server`: the connection's loop, with pipelining, `Expect: 100-continue`, upgrades and a
//!   graceful finish;
//! - `upgrade`: the stream handed to a WebSocket tunnel after `101`;
//! - `client`: the upstream side, one request written and its response read on a pooled
//!   server connection (`conn_pool`), driven by the request's own task.
//!
//! HTTP/2 stays on hyper and h2.

mod buffers;
pub(crate) mod client;
mod decode;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
mod head;
mod names;
mod response;
#[cfg(test)]
mod seeds;
mod server;
mod upgrade;

pub(crate) use head::ADDED_FIELDS;
pub(crate) use server::{Shutdown, serve};
pub(crate) use upgrade::{OnUpgrade, Upgraded};

/// How many inputs the parsers' fuzz smokes try: `default` in every test run, or
/// `SLUICE_FUZZ_ITERATIONS` for a long run (`SLUICE_FUZZ_ITERATIONS=100000000 cargo test
/// --release -p sluice-proxy --lib http1::`).
#[cfg(test)]
fn fuzz_iterations(default: usize) -> usize {
    std::env::var("SLUICE_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A xorshift64 generator: the fuzz smokes' inputs are the same on every run.
#[cfg(test)]
fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// Inputs for a parser's fuzz smoke: `seeds` in turn, each with one to four bytes from
/// `alphabet` flipped in, inserted or removed (`fuzz_iterations(20_000)` of them).
#[cfg(test)]
fn mutated<'a>(
    seeds: &'a [&'a [u8]],
    alphabet: &'a [u8],
    state: u64,
) -> impl Iterator<Item = Vec<u8>> + 'a {
    let mut next = xorshift(state);
    (0..fuzz_iterations(20_000)).map(move |i| {
        let mut raw = seeds[i % seeds.len()].to_vec();
        for _ in 0..=(next() % 4) {
            let at = (next() as usize) % (raw.len() + 1);
            let byte = alphabet[(next() as usize) % alphabet.len()];
            match next() % 3 {
                0 if at < raw.len() => raw[at] = byte,
                1 if at < raw.len() => {
                    raw.remove(at);
                }
                _ => raw.insert(at, byte),
            }
        }
        raw
    })
}
