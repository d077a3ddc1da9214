//! The configuration's firewall: each `[route.waf]` with its compiled rules, and the threads
//! that evaluate them.

use crate::engine::Rules;
use crate::facts::{RequestFacts, ResponseFacts};
use crate::inspect::{Session, inspect, inspect_response};
use crate::native::NativeRules;
use crate::native::session::inspect_native;
use crate::placement;
use crate::rules::{Piece, pieces};
use crate::stats::RouteStats;
use crate::verdict::Verdict;
use sluice_config::{Route, RouteWaf, WafEngine, WafMode, WafOverload, WafSettings};
use sluice_offload::{Engine as _, Job, Pool};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A rule set that failed to compile: the route, the piece and libmodsecurity's message
/// (with a rule file's path and line).
#[derive(Debug, Clone, thiserror::Error)]
#[error("route `{route}` [route.waf]: {message}; fix the rule (the rules in use keep serving)")]
pub struct WafError {
    /// The route whose rule set failed.
    pub route: String,
    /// What failed, where.
    pub message: String,
}

/// A compiled rule set, of the engine its `[[waf.ruleset]]` names.
#[derive(Debug, Clone)]
enum Engine {
    ModSecurity(Arc<Rules>),
    Native(Arc<NativeRules>),
}

impl Engine {
    /// `pieces` compiled by `engine`; the error names the file and line.
    fn build(engine: WafEngine, pieces: &[Piece]) -> Result<Engine, String> {
        Ok(match engine {
            WafEngine::ModSecurity => Engine::ModSecurity(Arc::new(Rules::build(pieces)?)),
            WafEngine::Native => {
                // The error names file, line and directive, and what to do instead.
                let set = crate::native::load(pieces).map_err(|e| e.to_string())?;
                let rules = NativeRules::new(set).map_err(|e| e.to_string())?;
                Engine::Native(Arc::new(rules))
            }
        })
    }
}

/// One job for the WAF's threads: a request (phases 1-2; its transaction kept where the
/// route inspects responses) or a response (phases 3-4, with its request's transaction).
#[derive(Clone)]
enum InspectJob {
    Request {
        rules: Engine,
        facts: Arc<RequestFacts>,
        keep: bool,
    },
    /// The session is taken by the job that runs (a job is cloned only to be retried, and
    /// the WAF's pool never retries): a `Mutex` because a `Job` is `Clone`.
    Response {
        session: Arc<Mutex<Option<Session>>>,
        facts: Arc<ResponseFacts>,
    },
}

impl Job for InspectJob {
    /// `None`: the engine failed on this request (a panic in the native engine, caught on
    /// the WAF thread, which goes on); the route's `on_overload` decides, counted.
    type Output = Option<(Verdict, Option<Session>)>;
}

/// Runs `job` on the calling thread (a WAF thread). A panic is caught here: it must neither
/// end the thread (its pool slot would never come back) nor reach libmodsecurity's frames.
fn run(job: &InspectJob) -> Option<(Verdict, Option<Session>)> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_unguarded(job))).ok()
}

fn run_unguarded(job: &InspectJob) -> (Verdict, Option<Session>) {
    match job {
        InspectJob::Request {
            rules: Engine::ModSecurity(rules),
            facts,
            keep,
        } => inspect(rules, facts, *keep),
        InspectJob::Request {
            rules: Engine::Native(rules),
            facts,
            keep,
        } => inspect_native(rules, facts, *keep),
        InspectJob::Response { session, facts } => {
            let taken = session.lock().unwrap_or_else(|e| e.into_inner()).take();
            match taken {
                Some(mut s) => (inspect_response(&mut s, facts), None),
                // Not reachable (one job per session); nothing to inspect with.
                None => (Verdict::default(), None),
            }
        }
    }
}

/// The threads that evaluate rules: an offload pool at the scheduler's idle priority (so a
/// storm of inspections never delays a route without a WAF) with a bounded queue.
pub struct Inspector {
    pool: Pool<InspectJob>,
    threads: usize,
    queue: usize,
}

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("threads", &self.threads)
            .field("queue", &self.queue)
            .finish()
    }
}

impl Inspector {
    /// Starts `threads` threads accepting up to `queue` requests at once.
    pub fn start(threads: usize, queue: usize) -> std::io::Result<Inspector> {
        thread_local!(static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
        let pool = Pool::new("sluice-waf", threads, queue, |job: &InspectJob| {
            if !LOWERED.get() {
                LOWERED.set(true);
                sluice_offload::idle::lower_to_idle();
            }
            Ok(run(job))
        })?;
        Ok(Inspector {
            pool,
            threads,
            queue,
        })
    }

    /// Requests accepted and not yet evaluated.
    pub fn in_flight(&self) -> usize {
        self.pool.in_flight()
    }
}

/// What became of a request at the WAF.
#[derive(Debug)]
pub enum Outcome {
    /// Forward it: no disruptive match (or mode `detect`); the verdict's matches are recorded.
    /// With `inspect_response`, the request's transaction, for its response.
    Pass(Verdict, Option<Box<PendingResponse>>),
    /// Refuse it with `status`; nothing goes upstream.
    Block(u16, Verdict),
    /// The WAF was saturated: forwarded uninspected (`true`, `on_overload = "open"`) or
    /// refused with 503 (`false`).
    Overloaded(bool),
}

/// A route's firewall: its settings, compiled rules and counters.
#[derive(Debug)]
pub struct RouteFirewall {
    /// `[route.waf]`.
    pub settings: Arc<RouteWaf>,
    rules: Engine,
    /// Its counters (kept across reloads while the route keeps its name).
    pub stats: Arc<RouteStats>,
    inspector: Arc<Inspector>,
    /// `[waf] inline_percent`: the share of a loop thread's time its native-engine
    /// inspections of requests without a body may take on that thread ([`placement`]).
    inline_percent: u32,
}

impl RouteFirewall {
    /// The engine that evaluates this route's rules, as `[[waf.ruleset]] engine` names it
    /// (`/status` shows it: the default is the native engine, and an operator reading a
    /// route's counters needs to know which engine produced them).
    pub fn engine(&self) -> &'static str {
        match self.rules {
            Engine::ModSecurity(_) => "modsecurity",
            Engine::Native(_) => "native",
        }
    }

    /// Inspects `facts` on the WAF's threads and decides, counted.
    pub async fn check(self: &Arc<Self>, facts: RequestFacts) -> Outcome {
        let job = InspectJob::Request {
            rules: self.rules.clone(),
            facts: Arc::new(facts),
            keep: self.settings.inspect_response,
        };
        match self.decide(job, None).await {
            (Outcome::Pass(verdict, _), Some(session)) => Outcome::Pass(
                verdict,
                Some(Box::new(PendingResponse {
                    firewall: self.clone(),
                    session,
                })),
            ),
            (outcome, _) => outcome,
        }
    }

    /// Runs `job` and turns its verdict into an outcome, counted, with the transaction where
    /// the job kept it. `response`: a response's job, and whether its request's inspection
    /// matched.
    async fn decide(&self, job: InspectJob, response: Option<bool>) -> (Outcome, Option<Session>) {
        let started = Instant::now();
        let done = match self.inline(&job) {
            Some(done) => Some(done),
            None => match self.inspector.pool.submit(job) {
                Ok(pending) => pending.await.ok(),
                Err(_) => None,
            },
        };
        let open = self.settings.on_overload == WafOverload::Open;
        let (verdict, session) = match done {
            Some(Some(done)) => done,
            Some(None) => {
                self.stats.faults.fetch_add(1, Relaxed);
                return (Outcome::Overloaded(open), None);
            }
            None => {
                if open {
                    &self.stats.overload_open
                } else {
                    &self.stats.overload_closed
                }
                .fetch_add(1, Relaxed);
                return (Outcome::Overloaded(open), None);
            }
        };
        let s = &self.stats;
        match response {
            None => &s.inspected,
            Some(_) => &s.responses,
        }
        .fetch_add(1, Relaxed);
        s.inspect_us.fetch_add(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            Relaxed,
        );
        if !verdict.matches.is_empty() {
            let mut rules = s.rules.lock().unwrap_or_else(|e| e.into_inner());
            for m in &verdict.matches {
                *rules.entry(m.id).or_default() += 1;
            }
        }
        match &verdict.intervention {
            Some(i) if self.settings.mode == WafMode::Block => {
                s.blocked.fetch_add(1, Relaxed);
                (Outcome::Block(i.status, verdict), None)
            }
            _ => {
                if !verdict.matches.is_empty() && response != Some(true) {
                    s.detected.fetch_add(1, Relaxed);
                }
                (Outcome::Pass(verdict, None), session)
            }
        }
    }

    /// `job` run on the calling (loop) thread, counted, where [`placement`] allows it: a
    /// request without a body and with a head of at most [`placement::INLINE_HEAD_MAX`]
    /// bytes, on the native engine, within the thread's share; `None`: hand it to the WAF's
    /// threads.
    fn inline(&self, job: &InspectJob) -> Option<Option<(Verdict, Option<Session>)>> {
        let InspectJob::Request {
            rules: Engine::Native(_),
            facts,
            ..
        } = job
        else {
            return None;
        };
        if self.inline_percent == 0
            || !facts.body.is_empty()
            || placement::head_len(facts) > placement::INLINE_HEAD_MAX
        {
            return None;
        }
        let done = placement::inline(self.inline_percent, || run(job))?;
        self.stats.inline.fetch_add(1, Relaxed);
        Some(done)
    }
}

/// A request's transaction kept for its response (`inspect_response`), with its route's
/// firewall: what the request path holds between the two inspections.
#[derive(Debug)]
pub struct PendingResponse {
    firewall: Arc<RouteFirewall>,
    session: Session,
}

impl PendingResponse {
    /// The route's `[route.waf]`.
    pub fn settings(&self) -> &RouteWaf {
        &self.firewall.settings
    }

    /// Inspects the response with its request's transaction and decides, counted: a block
    /// replaces the response. `matched_before`: the request's inspection matched (and was
    /// counted as a detection already).
    pub async fn check(self, facts: ResponseFacts, matched_before: bool) -> Outcome {
        let job = InspectJob::Response {
            session: Arc::new(Mutex::new(Some(self.session))),
            facts: Arc::new(facts),
        };
        self.firewall.decide(job, Some(matched_before)).await.0
    }
}

/// Every WAF route's rule set compiled and dropped, without starting threads (`sluice
/// check`): the first that fails, with its route, file and line.
pub fn check(settings: &WafSettings, routes: &[Arc<Route>]) -> Option<WafError> {
    compile(settings, routes).err()
}

/// A route with `[route.waf]`, its settings and its compiled rules.
struct Compiled<'a> {
    route: &'a Route,
    waf: &'a Arc<RouteWaf>,
    rules: Engine,
}

/// Each route with `[route.waf]` compiled, in order; routes whose pieces are equal share one
/// compiled set. The first failure names its route.
fn compile<'a>(
    settings: &WafSettings,
    routes: &'a [Arc<Route>],
) -> Result<Vec<Compiled<'a>>, WafError> {
    let mut compiled: Vec<((WafEngine, Vec<Piece>), Engine)> = Vec::new();
    let mut out = Vec::new();
    for route in routes {
        let Some(waf) = &route.waf else { continue };
        let error = |message: String| WafError {
            route: route.name.clone(),
            message,
        };
        let set = settings
            .rulesets
            .iter()
            .find(|s| s.name == waf.ruleset)
            .ok_or_else(|| error(format!("ruleset `{}` is not defined in [waf]", waf.ruleset)))?;
        let key = (set.engine, pieces(set, waf));
        let rules = match compiled.iter().find(|(k, _)| *k == key) {
            Some((_, r)) => r.clone(),
            None => {
                let rules = Engine::build(set.engine, &key.1).map_err(error)?;
                compiled.push((key, rules.clone()));
                rules
            }
        };
        out.push(Compiled { route, waf, rules });
    }
    Ok(out)
}

/// The configuration's firewall.
#[derive(Debug)]
pub struct WafRuntime {
    routes: HashMap<String, Arc<RouteFirewall>>,
    inspector: Arc<Inspector>,
}

impl WafRuntime {
    /// Compiles the rule set of every route with `[route.waf]` (routes with equal settings
    /// share one), on the calling thread: call it off the event loop. `previous` lends its
    /// threads (when `[waf]` kept their number) and its counters. `None`: no route has a WAF.
    pub fn build(
        settings: &WafSettings,
        routes: &[Arc<Route>],
        previous: Option<&WafRuntime>,
    ) -> Result<Option<WafRuntime>, WafError> {
        let compiled = compile(settings, routes)?;
        let Some(first) = compiled.first().map(|c| c.route) else {
            return Ok(None);
        };
        let inspector = match previous {
            Some(p)
                if p.inspector.threads == settings.threads
                    && p.inspector.queue == settings.queue =>
            {
                p.inspector.clone()
            }
            _ => Arc::new(
                Inspector::start(settings.threads, settings.queue).map_err(|e| WafError {
                    route: first.name.clone(),
                    message: format!("the WAF's threads could not start: {e}"),
                })?,
            ),
        };
        let mut built = HashMap::new();
        for Compiled { route, waf, rules } in compiled {
            let stats = previous
                .and_then(|p| p.routes.get(&route.name))
                .map(|r| r.stats.clone())
                .unwrap_or_default();
            let firewall = RouteFirewall {
                settings: waf.clone(),
                rules,
                stats,
                inspector: inspector.clone(),
                inline_percent: settings.inline_percent,
            };
            built.insert(route.name.clone(), Arc::new(firewall));
        }
        Ok(Some(WafRuntime {
            routes: built,
            inspector,
        }))
    }

    /// The firewall of route `name`, if it has one.
    pub fn route(&self, name: &str) -> Option<&Arc<RouteFirewall>> {
        self.routes.get(name)
    }

    /// Every route's counters, by route name.
    pub fn stats(&self) -> impl Iterator<Item = (&str, &RouteStats)> {
        self.routes.iter().map(|(n, r)| (n.as_str(), &*r.stats))
    }

    /// Requests waiting for or in evaluation.
    pub fn in_flight(&self) -> usize {
        self.inspector.in_flight()
    }
}
