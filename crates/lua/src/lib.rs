//! Scripting at the edge: operators' Lua scripts at the phases of the request path, with the
//! OpenResty `ngx` API (docs/lua.md).
//!
//! A configuration's scripts are compiled once into one LuaJIT state per worker thread
//! ([`LuaRuntime`]); a reload builds new states and requests in flight finish on the old
//! ones. A request takes the state of the thread it starts on and keeps it for every phase
//! (so `ngx.ctx` is one table from `rewrite` to `log`), even when it resumes on another
//! thread: a state runs one call at a time. What a script sees of a request is a [`View`]:
//! its parts moved in for the call and back out after, never a reference into the proxy.
//!
//! A script cannot take the gateway down: a compile error refuses the configuration (file
//! and line), a runtime error answers 500 with its traceback logged, a call that runs past
//! its instruction budget is stopped, a state's memory is bounded, and nothing in the API
//! blocks. Each is counted per script ([`stats`]).

mod api;
mod budget;
mod cfunc;
mod cjson;
mod current;
mod re;
mod shared;
mod state;
pub mod stats;
mod values;
mod view;
mod wait;
mod worker;

pub use shared::SharedDict;
pub use view::{Facts, View};
pub use wait::{Fetched, Fetcher, Outbound};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri, Version};
use sluice_config::{LuaCode, LuaPhase, LuaSettings, Route};
use state::{Ended, State, Step};
use stats::ScriptStats;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wait::{Pending, Resumed};

/// A configuration's Lua: its states and each route's scripts.
#[derive(Debug)]
pub struct LuaRuntime {
    settings: Arc<LuaSettings>,
    /// What the states were built from, to tell whether a new configuration needs new ones.
    scripts: Vec<(String, LuaPhase, LuaCode)>,
    states: Box<[Arc<State>]>,
    routes: HashMap<String, Arc<RouteScripts>>,
    dicts: Vec<Arc<SharedDict>>,
}

/// One route's scripts: their numbers in the states, by phase, and their counters.
#[derive(Debug)]
pub struct RouteScripts {
    route: Arc<str>,
    at: [Option<(usize, Arc<ScriptStats>)>; 5],
    states: Box<[Arc<State>]>,
}

/// A request's part in Lua: the state it runs on and its view, which goes from phase to
/// phase with what the earlier ones left (`ngx.ctx`, the request's head as the scripts
/// changed it, `ngx.header`). Shared by the response body's filter and the request's log
/// record; one phase runs at a time.
#[derive(Debug)]
pub struct RequestLua {
    state: Arc<State>,
    facts: Arc<Facts>,
    scripts: Arc<RouteScripts>,
    /// Boxed, made once per request and lent to each phase: taking it out and putting it
    /// back moves a pointer, where building a view per phase and moving it in and out of
    /// the phase's future copied it several times per call.
    view: Mutex<Option<Box<View>>>,
}

/// The request's head as the `rewrite` and `access` phases may change it.
pub struct RequestHead<'a> {
    /// The method (`ngx.req.set_method` changes it).
    pub method: &'a mut Method,
    /// The target (`ngx.req.set_uri`, `set_uri_args`).
    pub uri: &'a mut Uri,
    /// The headers (`ngx.req.set_header`, `clear_header`).
    pub headers: &'a mut HeaderMap,
    /// The protocol version.
    pub version: Version,
    /// The body, where the route buffered it.
    pub body: Option<Bytes>,
    /// Who `[route.auth]` accepted (`ngx.var.remote_user`).
    pub subject: Option<Arc<str>>,
}

/// What a request phase's script decided.
#[derive(Debug)]
pub enum Outcome {
    /// Go on.
    Continue,
    /// End the request with this response (`ngx.exit`, `ngx.redirect`, output).
    Respond(StatusCode, HeaderMap, Bytes),
    /// The script failed (logged with its traceback, counted): 500.
    Failed,
}

fn phase_index(phase: LuaPhase) -> usize {
    match phase {
        LuaPhase::Rewrite => 0,
        LuaPhase::Access => 1,
        LuaPhase::HeaderFilter => 2,
        LuaPhase::BodyFilter => 3,
        LuaPhase::Log => 4,
    }
}

/// The states' scripts: every route's, in route order, numbered by position.
fn scripts_of(routes: &[Arc<Route>]) -> Vec<(String, LuaPhase, LuaCode)> {
    routes
        .iter()
        .filter_map(|r| Some((r, r.lua.as_ref()?)))
        .flat_map(|(r, lua)| {
            LuaPhase::ALL
                .iter()
                .filter_map(move |p| Some((r.name.clone(), *p, lua.at(*p)?.clone())))
        })
        .collect()
}

impl LuaRuntime {
    /// The Lua of a configuration: `None` when no route has a script (no state is made);
    /// `old`'s when nothing Lua sees changed; else new states, or the first compile or
    /// `init` error (file, line, message).
    pub fn build(
        settings: &Arc<LuaSettings>,
        routes: &[Arc<Route>],
        old: Option<&Arc<LuaRuntime>>,
    ) -> Result<Option<Arc<LuaRuntime>>, String> {
        let scripts = scripts_of(routes);
        if scripts.is_empty() {
            return Ok(None);
        }
        if let Some(old) = old
            && *old.settings == **settings
            && old.scripts == scripts
        {
            return Ok(Some(old.clone()));
        }
        let dicts = shared::dictionaries(&settings.shared_dicts);
        let code: Vec<LuaCode> = scripts.iter().map(|(_, _, c)| c.clone()).collect();
        let states = (0..worker::worker_count())
            .map(|w| State::new(settings, &dicts, &code, w))
            .collect::<Result<Box<[_]>, String>>()?;
        let mut routes = HashMap::new();
        for (n, (route, phase, _)) in scripts.iter().enumerate() {
            let entry = routes.entry(route.clone()).or_insert_with(|| RouteScripts {
                route: route.as_str().into(),
                at: Default::default(),
                states: states.clone(),
            });
            entry.at[phase_index(*phase)] = Some((n, stats::for_script(route, *phase)));
        }
        Ok(Some(Arc::new(LuaRuntime {
            settings: settings.clone(),
            scripts,
            states,
            routes: routes.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
            dicts,
        })))
    }

    /// `route`'s scripts, if it has any.
    pub fn scripts(&self, route: &str) -> Option<Arc<RouteScripts>> {
        self.routes.get(route).cloned()
    }

    /// Bytes each state holds.
    pub fn memory(&self) -> Vec<usize> {
        self.states.iter().map(|s| s.used_memory()).collect()
    }

    /// The shared dictionaries: name, bytes used, capacity.
    pub fn dictionaries(&self) -> Vec<(String, usize, usize)> {
        self.dicts
            .iter()
            .map(|d| {
                let (used, cap) = d.usage();
                (d.name.clone(), used, cap)
            })
            .collect()
    }
}

/// What `sluice check` says about the configuration's Lua: the first compile or `init`
/// error, with its file and line.
pub fn check(settings: &Arc<LuaSettings>, routes: &[Arc<Route>]) -> Option<String> {
    let scripts = scripts_of(routes);
    if scripts.is_empty() {
        return None;
    }
    let dicts = shared::dictionaries(&settings.shared_dicts);
    let code: Vec<LuaCode> = scripts.into_iter().map(|(_, _, c)| c).collect();
    State::new(settings, &dicts, &code, 0).err()
}

thread_local! {
    /// This thread's state number (given out in turn at its first request).
    static SLOT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The state number of the calling thread, among `n`.
fn slot(n: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SLOT.with(|s| {
        let i = s.get().unwrap_or_else(|| {
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            s.set(Some(i));
            i
        });
        i % n.max(1)
    })
}

impl RouteScripts {
    /// Whether the route has a script at `phase`.
    pub fn has(&self, phase: LuaPhase) -> bool {
        self.at[phase_index(phase)].is_some()
    }

    /// The route's name.
    pub fn route(&self) -> &Arc<str> {
        &self.route
    }

    /// Runs one call of the script at `phase` on `view`, to its end, counted.
    fn call(&self, lua: &RequestLua, phase: LuaPhase, view: &mut View) -> Ended {
        let Some((script, stats)) = &self.at[phase_index(phase)] else {
            return Ended::Returned;
        };
        let started = Instant::now();
        let ended = lua.state.call(*script, view);
        stats.observe(started.elapsed());
        self.report(phase, view, &ended, stats);
        ended
    }

    /// Runs one call of the script at `phase` (`rewrite`, `access`) on `view`, counted; what
    /// it waits for (an outbound request, a sleep) is awaited here, the state free for other
    /// requests meanwhile. The time counted is the time in Lua, not the waits.
    async fn run<F: Fetcher>(
        &self,
        lua: &RequestLua,
        phase: LuaPhase,
        view: &mut View,
        fetcher: &F,
    ) -> Ended {
        let Some((script, stats)) = &self.at[phase_index(phase)] else {
            return Ended::Returned;
        };
        let mut spent = Duration::ZERO;
        let mut started = Instant::now();
        let mut step = lua.state.start(*script, view);
        let ended = loop {
            spent += started.elapsed();
            let (run, pending) = match step {
                Step::Ended(ended) => break ended,
                Step::Waiting(run, pending) => (run, pending),
            };
            // Boxed: the exchange's future is large, and inline it would make every call's
            // future (and each move of it) as large, waiting or not.
            let resumed = Box::pin(wait(pending, fetcher, stats)).await;
            started = Instant::now();
            step = lua.state.resume(run, resumed, view);
        };
        stats.observe(spent);
        self.report(phase, view, &ended, stats);
        ended
    }

    /// Counts and logs how a call ended.
    fn report(&self, phase: LuaPhase, view: &View, ended: &Ended, stats: &ScriptStats) {
        match ended {
            Ended::Failed(message) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    target: "sluice::lua",
                    route = &*self.route,
                    request = view.facts.request_id.as_deref().unwrap_or(""),
                    "[lua] {} failed: {message}",
                    phase.name()
                );
            }
            Ended::Stopped => {
                stats.stopped.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    target: "sluice::lua",
                    route = &*self.route,
                    request = view.facts.request_id.as_deref().unwrap_or(""),
                    "[lua] {} stopped at its instruction budget ([lua] max_instructions)",
                    phase.name()
                );
            }
            Ended::Exit(_) => {
                stats.exits.fetch_add(1, Ordering::Relaxed);
            }
            Ended::Returned => {}
        }
    }

    /// The request's Lua, made at its first script (the state of the thread it is on).
    pub fn request(self: &Arc<Self>, facts: Facts) -> Arc<RequestLua> {
        let state = self.states[slot(self.states.len())].clone();
        let facts = Arc::new(facts);
        Arc::new(RequestLua {
            state,
            view: Mutex::new(Some(Box::new(View::new(LuaPhase::Rewrite, facts.clone())))),
            facts,
            scripts: self.clone(),
        })
    }
}

impl RequestLua {
    /// The route's scripts.
    pub fn scripts(&self) -> &Arc<RouteScripts> {
        &self.scripts
    }

    /// The request's view, for a call in `phase`.
    fn take_view(&self, phase: LuaPhase) -> Box<View> {
        let kept = self.view.lock().unwrap_or_else(|p| p.into_inner()).take();
        // Only a phase that panicked loses the view; the next gets a fresh one.
        let mut view = kept.unwrap_or_else(|| Box::new(View::new(phase, self.facts.clone())));
        view.begin(phase);
        view
    }

    /// Puts the view back for the next phase.
    fn put_view(&self, view: Box<View>) {
        *self.view.lock().unwrap_or_else(|p| p.into_inner()) = Some(view);
    }

    /// Phase `rewrite` or `access`: the script may change the request's head, or end it;
    /// its outbound requests go through `fetcher`.
    pub async fn run_request<F: Fetcher>(
        &self,
        phase: LuaPhase,
        head: RequestHead<'_>,
        fetcher: &F,
    ) -> Outcome {
        let mut view = self.take_view(phase);
        view.method.clone_from(head.method);
        view.uri = std::mem::take(head.uri);
        view.headers = std::mem::take(head.headers);
        view.version = head.version;
        view.body = head.body;
        view.subject = head.subject;
        let ended = self.scripts.run(self, phase, &mut view, fetcher).await;
        head.method.clone_from(&view.method);
        head.uri.clone_from(&view.uri);
        *head.headers = std::mem::take(&mut view.headers);
        let outcome = outcome(ended, &mut view);
        self.put_view(view);
        outcome
    }

    /// Phase `header_filter`: the response's status and head, which the script may change;
    /// `false` when it failed (the response becomes a 500).
    pub fn run_header_filter(
        &self,
        request_headers: &mut HeaderMap,
        status: &mut StatusCode,
        headers: &mut HeaderMap,
    ) -> bool {
        let mut view = self.take_view(LuaPhase::HeaderFilter);
        view.headers = std::mem::take(request_headers);
        view.status = status.as_u16();
        view.response_headers = std::mem::take(headers);
        let ended = self.scripts.call(self, LuaPhase::HeaderFilter, &mut view);
        *request_headers = std::mem::take(&mut view.headers);
        *headers = std::mem::take(&mut view.response_headers);
        *status = StatusCode::from_u16(view.status).unwrap_or(*status);
        self.put_view(view);
        !matches!(ended, Ended::Failed(_) | Ended::Stopped)
    }

    /// Phase `body_filter`: one piece of the body (`eof` on the last, possibly empty); what
    /// goes on instead and whether the body ends there, or `None` when the script failed
    /// (the body is cut short, as NGINX aborts it).
    pub fn run_body_filter(&self, chunk: Bytes, eof: bool) -> Option<(Bytes, bool)> {
        let mut view = self.take_view(LuaPhase::BodyFilter);
        view.chunk = Some(chunk);
        view.eof = eof;
        let ended = self.scripts.call(self, LuaPhase::BodyFilter, &mut view);
        let out = match ended {
            Ended::Failed(_) | Ended::Stopped => None,
            _ => Some((view.chunk.take().unwrap_or_default(), view.eof)),
        };
        self.put_view(view);
        out
    }

    /// Phase `log`, after the response: read-only.
    pub fn run_log(&self, status: u16, bytes_sent: u64) {
        let mut view = self.take_view(LuaPhase::Log);
        view.status = status;
        view.bytes_sent = bytes_sent;
        self.scripts.call(self, LuaPhase::Log, &mut view);
        self.put_view(view);
    }
}

/// Waits for what a call asked for: the outbound request sent through `fetcher` (counted),
/// or the sleep.
async fn wait<F: Fetcher>(pending: Pending, fetcher: &F, stats: &ScriptStats) -> Resumed {
    match pending {
        Pending::Sleep(d) => {
            tokio::time::sleep(d).await;
            Resumed::Slept
        }
        Pending::Http(call) => {
            stats.outbound.fetch_add(1, Ordering::Relaxed);
            let fetched = fetcher.fetch(*call).await;
            if fetched.is_err() {
                stats.outbound_failures.fetch_add(1, Ordering::Relaxed);
            }
            Resumed::Http(fetched)
        }
    }
}

/// What a request phase's call comes to.
fn outcome(ended: Ended, view: &mut View) -> Outcome {
    match ended {
        Ended::Failed(_) | Ended::Stopped => Outcome::Failed,
        Ended::Exit(status) if status < 0 => Outcome::Failed,
        Ended::Exit(status) if status < 200 && view.output.is_empty() => Outcome::Continue,
        Ended::Returned if view.output.is_empty() => Outcome::Continue,
        ended => {
            let status = match ended {
                Ended::Exit(s) if s >= 200 => u16::try_from(s).unwrap_or(500),
                _ if view.status >= 200 => view.status,
                _ => 200,
            };
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            Outcome::Respond(
                status,
                std::mem::take(&mut view.response_headers),
                std::mem::take(&mut view.output).into(),
            )
        }
    }
}

#[cfg(test)]
mod tests;
