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
//! its instruction budget is stopped, a state's memory and a call's output are bounded, a
//! panic in the API's Rust is the call's Lua error (`guard.rs`), and nothing in the API
//! blocks. Each is counted ([`stats`]).

mod api;
mod budget;
mod cfunc;
mod cjson;
mod current;
mod ffi_lib;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod gate;
mod guard;
mod output;
mod pattern;
mod raise;
mod re;
mod runner;
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
use http::{HeaderMap, Method, Request, StatusCode, Uri, Version, header};
use sluice_config::{LuaCode, LuaPhase, LuaSettings, Route};
use state::{Ended, State, Step};
use stats::ScriptStats;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
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
    at: [Option<(usize, Arc<ScriptStats>)>; 6],
    states: Box<[Arc<State>]>,
}

/// A request's part in Lua: the state it runs on and its view, which goes from phase to
/// phase with what the earlier ones left (`ngx.ctx`, the request's head as the scripts
/// changed it, `ngx.header`). Shared by the response body's filter and the request's log
/// record; one phase runs at a time.
#[derive(Debug)]
pub struct RequestLua {
    /// The state's number among the route's (`scripts.states`): the scripts hold the
    /// states, which spares a reference count per request.
    state: usize,
    scripts: Arc<RouteScripts>,
    /// Made with the request's Lua (one allocation) and lent to each phase in place: a
    /// call that waits leaves it here, the lock not held across the wait. One phase runs
    /// at a time, so the lock is never contended.
    view: Mutex<View>,
}

/// The request as the `rewrite` and `access` phases see it: its method, target and headers
/// move into the script's view for the call (swapped with what the view holds, so that
/// nothing is built or dropped per call) and back after it.
pub struct RequestHead<'a, B> {
    /// The request (`ngx.req.set_method`, `set_uri`, `set_header`, ... change it).
    pub request: &'a mut Request<B>,
    /// The body, where the route buffered it.
    pub body: Option<Bytes>,
    /// Who `[route.auth]` accepted (`ngx.var.remote_user`).
    pub subject: Option<Arc<str>>,
}

/// Where a `rewrite` or `access` call stands once started: most end without waiting.
pub enum Started {
    /// It ended.
    Done(Outcome),
    /// It waits (an outbound request, a sleep): [`RequestLua::finish_request`] goes on.
    Waiting(Waiting),
}

/// A `rewrite` or `access` call that waits: its runner and what it waits for (the
/// request's head stays in the request's view meanwhile).
pub struct Waiting {
    run: state::Run,
    pending: Pending,
    spent: Duration,
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
        LuaPhase::Content => 2,
        LuaPhase::HeaderFilter => 3,
        LuaPhase::BodyFilter => 4,
        LuaPhase::Log => 5,
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

/// What `sluice check` warns about in the configuration's scripts: each call of a part of
/// lua-nginx-module's API that Sluice does not have (a scan of the text: a name in a
/// comment counts too, so it is a warning; the call raises at request time).
pub fn warnings(settings: &LuaSettings, routes: &[Arc<Route>]) -> Vec<String> {
    let init = settings
        .init
        .iter()
        .map(|c| ("[lua] init".to_owned(), c.clone()));
    let scripts = scripts_of(routes).into_iter().map(|(route, phase, code)| {
        (
            format!("route `{route}` [route.lua] {}", phase.name()),
            code,
        )
    });
    init.chain(scripts)
        .flat_map(|(at, code)| {
            api::compat::unsupported_in(&code.source)
                .into_iter()
                .map(move |name| {
                    format!(
                        "{}: {at} calls {name}, which Sluice does not have: it raises an error when reached (docs/lua.md lists the API)",
                        code.file()
                    )
                })
        })
        .collect()
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

    /// Whether a script runs after the request phases (`header_filter`, `body_filter`,
    /// `log`), where `ngx.var` reads the request's method and target.
    fn reads_head_later(&self) -> bool {
        self.at[phase_index(LuaPhase::HeaderFilter)..]
            .iter()
            .any(Option::is_some)
    }

    /// The script at `phase` (its number in the states) and its counters.
    fn at(&self, phase: LuaPhase) -> Option<(usize, &ScriptStats)> {
        self.at[phase_index(phase)]
            .as_ref()
            .map(|(script, stats)| (*script, &**stats))
    }

    /// Runs one call of the script at `phase` on `view`, to its end, counted.
    fn call(&self, lua: &RequestLua, phase: LuaPhase, view: &mut View) -> Ended {
        let Some((script, stats)) = self.at(phase) else {
            return Ended::Returned;
        };
        let started = Instant::now();
        let ended = lua.state().call(script, view);
        stats.observe(started.elapsed());
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

    /// The request's Lua, made at its first script: the state of the thread it is on,
    /// unless a stuck call holds that one (a thread that shares it, `gate.rs`).
    pub fn request(self: &Arc<Self>, facts: Facts) -> Arc<RequestLua> {
        let n = self.states.len();
        let mut state = slot(n);
        if self.states[state].is_stuck() {
            state = (1..n)
                .map(|i| (state + i) % n)
                .find(|i| !self.states[*i].is_stuck())
                .unwrap_or(state);
        }
        Arc::new(RequestLua {
            state,
            view: Mutex::new(View::new(LuaPhase::Rewrite, facts)),
            scripts: self.clone(),
        })
    }
}

impl RequestLua {
    /// The state the request runs on.
    fn state(&self) -> &Arc<State> {
        &self.scripts.states[self.state]
    }

    /// The route's scripts.
    pub fn scripts(&self) -> &Arc<RouteScripts> {
        &self.scripts
    }

    /// The request's view as it stands (a call that waited goes on with it).
    fn view(&self) -> MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The request's view, readied for a call in `phase`.
    fn view_for(&self, phase: LuaPhase) -> MutexGuard<'_, View> {
        let mut view = self.view();
        view.begin(phase);
        view
    }

    /// Phase `rewrite` or `access`, to its end: the script may change the request's head,
    /// or end it; its outbound requests go through `fetcher`.
    pub async fn run_request<B, F: Fetcher>(
        &self,
        phase: LuaPhase,
        mut head: RequestHead<'_, B>,
        fetcher: &F,
    ) -> Outcome {
        match self.start_request(phase, &mut head) {
            Started::Done(outcome) => outcome,
            Started::Waiting(waiting) => self.finish_request(waiting, head.request, fetcher).await,
        }
    }

    /// Starts phase `rewrite` or `access`: its outcome when the call ends without waiting
    /// (no future is made for it), else the call waiting, for [`Self::finish_request`].
    pub fn start_request<B>(&self, phase: LuaPhase, head: &mut RequestHead<'_, B>) -> Started {
        let mut view = self.view_for(phase);
        let req = &mut *head.request;
        std::mem::swap(req.method_mut(), &mut view.method);
        std::mem::swap(req.uri_mut(), &mut view.uri);
        std::mem::swap(req.headers_mut(), &mut view.headers);
        view.version = req.version();
        view.body = head.body.take();
        view.subject = head.subject.take();
        let Some((script, stats)) = self.scripts.at(phase) else {
            return Started::Done(self.end_request(req, &mut view, Ended::Returned));
        };
        let started = Instant::now();
        match self.state().start(script, &mut view) {
            Step::Ended(ended) => {
                stats.observe(started.elapsed());
                self.scripts.report(phase, &view, &ended, stats);
                Started::Done(self.end_request(req, &mut view, ended))
            }
            Step::Waiting(run, pending) => Started::Waiting(Waiting {
                run,
                pending,
                spent: started.elapsed(),
            }),
        }
    }

    /// Goes on with a call that waits, to its end: what it waits for is awaited here, the
    /// state free for other requests meanwhile. The time counted is the time in Lua, not
    /// the waits.
    pub async fn finish_request<B, F: Fetcher>(
        &self,
        waiting: Waiting,
        request: &mut Request<B>,
        fetcher: &F,
    ) -> Outcome {
        let Waiting {
            mut run,
            mut pending,
            mut spent,
        } = waiting;
        let phase = self.view().phase;
        let Some((_, stats)) = self.scripts.at(phase) else {
            return self.end_request(request, &mut self.view(), Ended::Returned);
        };
        let ended = loop {
            // Boxed: the exchange's future is large, and inline it would make the caller's
            // future as large.
            let resumed = Box::pin(wait(pending, fetcher, stats)).await;
            let started = Instant::now();
            let step = self.state().resume(run, resumed, &mut self.view());
            spent += started.elapsed();
            match step {
                Step::Ended(ended) => break ended,
                Step::Waiting(r, p) => (run, pending) = (r, p),
            }
        };
        stats.observe(spent);
        let mut view = self.view();
        self.scripts.report(phase, &view, &ended, stats);
        self.end_request(request, &mut view, ended)
    }

    /// The request's head back from the view, and what the call decided. Where a later
    /// phase has a script, the view keeps a copy of the method and target for its `ngx.var`
    /// (they are swapped back otherwise, which copies nothing).
    fn end_request<B>(&self, req: &mut Request<B>, view: &mut View, ended: Ended) -> Outcome {
        if self.scripts.reads_head_later() {
            req.method_mut().clone_from(&view.method);
            req.uri_mut().clone_from(&view.uri);
        } else {
            std::mem::swap(req.method_mut(), &mut view.method);
            std::mem::swap(req.uri_mut(), &mut view.uri);
        }
        std::mem::swap(req.headers_mut(), &mut view.headers);
        outcome(ended, view)
    }

    /// The request's method, target and version for a route whose scripts all run after
    /// the request phases (`header_filter`, `body_filter`, `log`): copied once, at the
    /// request's start, as no request phase moves them into the view.
    pub fn keep_head(&self, method: &Method, uri: &Uri, version: Version) {
        let mut view = self.view();
        view.method.clone_from(method);
        view.uri.clone_from(uri);
        view.version = version;
    }

    /// The request's headers for the `log` script (`ngx.var.http_*` there), copied once
    /// the response's head is on its way.
    pub fn keep_for_log(&self, request_headers: &HeaderMap) {
        self.view().headers.clone_from(request_headers);
    }

    /// The response headers a request phase's script set (`ngx.header`) on a request that
    /// then went on: added to the response, as NGINX keeps them beside the upstream's
    /// fields; the upstream's `Content-Type` and `Content-Length` win, as in NGINX.
    pub fn add_script_headers(&self, headers: &mut HeaderMap) {
        let mut view = self.view();
        if view.response_headers.is_empty() {
            return;
        }
        let set = std::mem::take(&mut view.response_headers);
        drop(view);
        let mut name = None;
        for (n, value) in set {
            if let Some(n) = n {
                let upstream_wins = n == header::CONTENT_TYPE || n == header::CONTENT_LENGTH;
                name = (!upstream_wins || !headers.contains_key(&n)).then_some(n);
            }
            if let Some(n) = &name {
                headers.append(n.clone(), value);
            }
        }
    }

    /// Phase `header_filter`: the response's status and head, which the script may change;
    /// `false` when it failed (the response becomes a 500).
    pub fn run_header_filter(
        &self,
        request_headers: &mut HeaderMap,
        status: &mut StatusCode,
        headers: &mut HeaderMap,
    ) -> bool {
        let mut view = self.view_for(LuaPhase::HeaderFilter);
        view.headers = std::mem::take(request_headers);
        view.status = status.as_u16();
        view.response_headers = std::mem::take(headers);
        let ended = self.scripts.call(self, LuaPhase::HeaderFilter, &mut view);
        *request_headers = std::mem::take(&mut view.headers);
        *headers = std::mem::take(&mut view.response_headers);
        *status = StatusCode::from_u16(view.status).unwrap_or(*status);
        !matches!(ended, Ended::Failed(_) | Ended::Stopped)
    }

    /// Phase `body_filter`: one piece of the body (`eof` on the last, possibly empty); what
    /// goes on instead and whether the body ends there, or `None` when the script failed
    /// (the body is cut short, as NGINX aborts it).
    pub fn run_body_filter(&self, chunk: Bytes, eof: bool) -> Option<(Bytes, bool)> {
        let mut view = self.view_for(LuaPhase::BodyFilter);
        view.chunk = Some(chunk);
        view.eof = eof;
        let ended = self.scripts.call(self, LuaPhase::BodyFilter, &mut view);
        match ended {
            Ended::Failed(_) | Ended::Stopped => None,
            _ => Some((view.chunk.take().unwrap_or_default(), view.eof)),
        }
    }

    /// Phase `log`, after the response: read-only.
    pub fn run_log(&self, status: u16, bytes_sent: u64) {
        let mut view = self.view_for(LuaPhase::Log);
        view.status = status;
        view.bytes_sent = bytes_sent;
        self.scripts.call(self, LuaPhase::Log, &mut view);
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

/// The page NGINX sends for `ngx.exit(status)` or `ngx.redirect` without output (its
/// `ngx_http_error_pages`, signed `sluice`): scripts and their clients that look for the
/// status's words in the body find them.
fn error_page(status: StatusCode) -> Vec<u8> {
    let line = format!(
        "{} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    format!(
        "<html>\r\n<head><title>{line}</title></head>\r\n<body>\r\n<center><h1>{line}</h1></center>\r\n<hr><center>sluice</center>\r\n</body>\r\n</html>\r\n"
    )
    .into_bytes()
}

/// What a request phase's call comes to, as lua-nginx-module's `ngx_http_lua_handle_exit`
/// decides it: an answer once the script sent its head (output, `ngx.flush`) or ran in
/// `content`; `ngx.exit(2xx)` answers with `ngx.status` where the script set one, and
/// `ngx.exit(3xx-5xx, 204)` before output with that status; after output the status sent
/// stays. `ngx.exit(ngx.OK)` (or a return) in `rewrite`/`access` goes on.
fn outcome(ended: Ended, view: &mut View) -> Outcome {
    let sent_status = if view.status >= 200 { view.status } else { 200 };
    let status = match ended {
        Ended::Failed(_) | Ended::Stopped => return Outcome::Failed,
        Ended::Exit(s) if s < 0 => return Outcome::Failed,
        _ if view.header_sent => sent_status,
        Ended::Exit(s) if s >= 300 || s == 204 => {
            let status = u16::try_from(s)
                .ok()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            if status.as_u16() != 304 && status.as_u16() >= 300 {
                view.output = error_page(status);
                view.response_headers.insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/html"),
                );
            }
            status.as_u16()
        }
        Ended::Exit(s) if s >= 200 => {
            if view.status >= 200 {
                view.status
            } else {
                u16::try_from(s).unwrap_or(500)
            }
        }
        _ if view.phase == LuaPhase::Content => sent_status,
        _ => return Outcome::Continue,
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Outcome::Respond(
        status,
        std::mem::take(&mut view.response_headers),
        std::mem::take(&mut view.output).into(),
    )
}

#[cfg(test)]
mod tests;
