//! Scripting settings: `[lua]` and each route's `[route.lua]`. The code is kept as text
//! here; `sluice-lua` compiles it (and `sluice check` reports a compile error by file and
//! line, which [`LuaCode`] keeps the means for).

use std::sync::Arc;

/// A piece of Lua code and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaCode {
    /// The chunk name Lua puts in errors and tracebacks: `@` and the file (the
    /// configuration file for inline code, else the script's file).
    pub chunk: String,
    /// The code, preceded by as many empty lines as put it at its line in `chunk`'s file,
    /// so that Lua's line numbers are the file's.
    pub source: Arc<str>,
}

impl LuaCode {
    /// The file that holds the code (the chunk name without its `@`).
    pub fn file(&self) -> &str {
        self.chunk.strip_prefix('@').unwrap_or(&self.chunk)
    }
}

/// The phases a route's scripts attach to, in request order (OpenResty's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LuaPhase {
    /// First in `access`.
    Rewrite,
    /// Last in `access`.
    Access,
    /// After `access`: the script's output is the response (OpenResty's `content_by_lua`).
    Content,
    /// The response's head.
    HeaderFilter,
    /// Each piece of the response's body.
    BodyFilter,
    /// After the response.
    Log,
}

impl LuaPhase {
    /// Every phase, in request order.
    pub const ALL: [LuaPhase; 6] = [
        LuaPhase::Rewrite,
        LuaPhase::Access,
        LuaPhase::Content,
        LuaPhase::HeaderFilter,
        LuaPhase::BodyFilter,
        LuaPhase::Log,
    ];

    /// The key in `[route.lua]` (and the metrics' `phase` label).
    pub fn name(self) -> &'static str {
        match self {
            LuaPhase::Rewrite => "rewrite",
            LuaPhase::Access => "access",
            LuaPhase::Content => "content",
            LuaPhase::HeaderFilter => "header_filter",
            LuaPhase::BodyFilter => "body_filter",
            LuaPhase::Log => "log",
        }
    }
}

/// `[route.lua]`: a route's scripts by phase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteLua {
    /// First in phase `access`, before the ACL.
    pub rewrite: Option<LuaCode>,
    /// Last in phase `access`.
    pub access: Option<LuaCode>,
    /// After phase `access`: answers the request instead of an upstream.
    pub content: Option<LuaCode>,
    /// On the upstream response's head.
    pub header_filter: Option<LuaCode>,
    /// On each piece of the upstream response's body.
    pub body_filter: Option<LuaCode>,
    /// After the response.
    pub log: Option<LuaCode>,
}

impl RouteLua {
    /// The script at `phase`, if the route has one.
    pub fn at(&self, phase: LuaPhase) -> Option<&LuaCode> {
        match phase {
            LuaPhase::Rewrite => self.rewrite.as_ref(),
            LuaPhase::Access => self.access.as_ref(),
            LuaPhase::Content => self.content.as_ref(),
            LuaPhase::HeaderFilter => self.header_filter.as_ref(),
            LuaPhase::BodyFilter => self.body_filter.as_ref(),
            LuaPhase::Log => self.log.as_ref(),
        }
    }

    /// Whether a script runs after the request has gone upstream (header or body filter,
    /// log): the request's facts are then kept for it.
    pub fn after_upstream(&self) -> bool {
        self.header_filter.is_some() || self.body_filter.is_some() || self.log.is_some()
    }
}

/// One `ngx.shared` dictionary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedDictSize {
    /// `ngx.shared.NAME`.
    pub name: String,
    /// Bytes its keys and values may take.
    pub bytes: u64,
}

/// `[lua]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaSettings {
    /// Run once in every state.
    pub init: Option<LuaCode>,
    /// `package.path` for `require`.
    pub package_path: Option<String>,
    /// `ngx.shared`.
    pub shared_dicts: Vec<SharedDictSize>,
    /// Instructions per call before it is stopped, counted from the call's first 10-20 ms
    /// (sluice-lua's `budget.rs`); 0 for no budget (JIT on).
    pub max_instructions: u64,
    /// Whether the JIT compiler runs (under a budget, with polls in every chunk: sluice-lua's
    /// `budget/rewrite.rs`).
    pub jit: bool,
    /// Bytes a state may hold.
    pub max_memory: u64,
}

/// The default instruction budget of one call: tens of milliseconds of interpreted Lua,
/// far beyond what a request's script needs, short enough that a runaway loop is stopped
/// before clients notice much.
pub const DEFAULT_MAX_INSTRUCTIONS: u64 = 10_000_000;

impl Default for LuaSettings {
    fn default() -> Self {
        LuaSettings {
            init: None,
            package_path: None,
            shared_dicts: Vec::new(),
            max_instructions: DEFAULT_MAX_INSTRUCTIONS,
            jit: true,
            max_memory: 64 << 20,
        }
    }
}
