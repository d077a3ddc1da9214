//! The raw schema of scripting: `[lua]` (what every state shares) and `[route.lua]`.

use super::size::RawSize;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

/// A string with its place in the file.
type SpannedStr = Spanned<String>;

/// `[lua]`: what is global to every Lua state (one per worker thread).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLua {
    /// Code run once in every state before any request (OpenResty's `init_by_lua` and
    /// `init_worker_by_lua` in one: there is no master process that forks).
    pub init: Option<SpannedStr>,
    /// The same, from a file.
    pub init_file: Option<SpannedStr>,
    /// Where `require` looks for Lua modules (`package.path`, `;;` for the default).
    pub package_path: Option<SpannedStr>,
    /// `ngx.shared.NAME` dictionaries and their sizes (`{ counts = "10m" }`).
    pub shared_dicts: Option<BTreeMap<String, Spanned<RawSize>>>,
    /// Lua VM instructions one call may run before it is stopped (default 10,000,000;
    /// 0: no budget, and the JIT compiler on).
    pub max_instructions: Option<Spanned<u64>>,
    /// Whether the JIT compiler runs under the instruction budget (default false; true
    /// compiles every chunk with the budget's polls). Without a budget it runs unless false.
    pub jit: Option<Spanned<bool>>,
    /// Memory one state may hold (default `"64m"`); a state over it after a full
    /// collection is replaced.
    pub max_memory: Option<Spanned<RawSize>>,
}

/// `[route.lua]`: scripts at the phases of the request path, inline or from files.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteLua {
    /// First in phase `access` (OpenResty's `rewrite_by_lua`).
    pub rewrite: Option<SpannedStr>,
    /// The same, from a file.
    pub rewrite_file: Option<SpannedStr>,
    /// Last in phase `access`, after authentication and the rate limit (`access_by_lua`).
    pub access: Option<SpannedStr>,
    /// The same, from a file.
    pub access_file: Option<SpannedStr>,
    /// After `access`: the script's output answers the request (`content_by_lua`); the
    /// route then needs no upstream.
    pub content: Option<SpannedStr>,
    /// The same, from a file.
    pub content_file: Option<SpannedStr>,
    /// On the response's head (`header_filter_by_lua`).
    pub header_filter: Option<SpannedStr>,
    /// The same, from a file.
    pub header_filter_file: Option<SpannedStr>,
    /// On each piece of the response's body (`body_filter_by_lua`).
    pub body_filter: Option<SpannedStr>,
    /// The same, from a file.
    pub body_filter_file: Option<SpannedStr>,
    /// After the response is sent (`log_by_lua`).
    pub log: Option<SpannedStr>,
    /// The same, from a file.
    pub log_file: Option<SpannedStr>,
}
