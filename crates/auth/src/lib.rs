//! Identity at Sluice's edge: who a request comes from, decided at the `access` phase of
//! the request path (docs/ARCHITECTURE.md, "The request path").
//!
//! A route's `[route.auth]` becomes one [`Authenticator`], built when a configuration is
//! applied and kept across reloads while its settings stay (with its caches, its JWKS and its
//! file watchers). Its methods are tried in a fixed order, cheapest first: `cert` (the client
//! certificate the listener verified), `jwt` (a cache lookup for a known token), `keys` (a
//! hash), `basic` (a cache lookup, else bcrypt on the gateway's bounded [`HashPool`]),
//! `forward` (a subrequest). With `require = "any"` the first that accepts the
//! request decides; a method whose credentials are absent is skipped; when none accepts, the
//! first refusal answers (401 with every method's challenge when nothing was presented).
//! With `"all"` every method must accept. The subject comes from the first method that
//! accepted: the certificate's subject, the token's `sub`, the key's name, the user, the
//! service's subject header.
//!
//! CORS (`[route.cors]`) is here too: pure functions over the route's policy ([`cors`]).

mod api_keys;
mod client;
pub mod cors;
mod counters;
mod forward;
mod hashing;
mod htpasswd;
mod jwt;
pub mod query;
mod token_error;
mod ttl_cache;
mod watched;

pub use api_keys::{KeyEditError, key_line};
pub use counters::{AuthCounters, METHODS, Reason};
pub use hashing::HashPool;
pub use token_error::TokenError;

use api_keys::ApiKeys;
use forward::{Decision, Forwarder, Original};
use hashing::Busy;
use htpasswd::{Htpasswd, Stored};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri};
use jwt::JwtVerifier;
use sluice_config::{HashKey, RouteAuth, TokenSource};
use std::collections::HashMap;
use std::sync::Arc;
use ttl_cache::{TtlCache, unix_now};
use watched::Watched;

/// A client certificate the listener verified.
#[derive(Debug, Clone, Copy)]
pub struct PresentedCert<'a> {
    /// RFC 4514 subject.
    pub subject: &'a str,
    /// `DNS:…`, `URI:…`, `email:…` subjectAltNames.
    pub sans: &'a [String],
}

/// The request as authentication sees it.
pub struct Presented<'a> {
    /// The connection's verified client certificate, if any.
    pub client_cert: Option<PresentedCert<'a>>,
    /// Its method.
    pub method: &'a Method,
    /// Its target.
    pub uri: &'a Uri,
    /// Its headers.
    pub headers: &'a HeaderMap,
    /// The host it asked for.
    pub host: &'a str,
    /// Whether it came over TLS.
    pub https: bool,
    /// The client's address.
    pub client: std::net::IpAddr,
    /// A header's, cookie's or query argument's value (the gateway's own reading of them).
    pub part: &'a (dyn Fn(&HashKey) -> Option<&'a [u8]> + Sync),
}

/// Who a request was accepted as.
#[derive(Debug)]
pub struct Identity {
    /// The subject.
    pub subject: Arc<str>,
    /// Which method accepted it (one of [`METHODS`]).
    pub method: &'static str,
    /// Headers for the upstream request (claims, the service's chosen headers).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// Why and how a request is refused.
#[derive(Debug)]
pub struct Denial {
    /// 401, 403, 500, or 503 (the password-hashing pool full).
    pub status: StatusCode,
    /// `WWW-Authenticate` challenges, or the service's headers.
    pub headers: HeaderMap,
    /// For the counters and the log.
    pub reason: Reason,
}

/// One method's verdict.
enum Verdict {
    Pass(Arc<str>, Vec<(HeaderName, HeaderValue)>),
    /// No credentials for this method.
    Absent,
    Fail(Denial),
}

/// Basic authentication: the watched file and the verified credentials.
struct Basic {
    file: Arc<Watched<Htpasswd>>,
    /// By user and a salted hash of the password: the password itself is never kept.
    verified: TtlCache<Arc<str>>,
    salt: [u8; 16],
}

/// One route's authentication.
pub struct Authenticator {
    /// Its settings.
    pub config: Arc<RouteAuth>,
    jwt: Option<JwtVerifier>,
    keys: Option<Arc<Watched<ApiKeys>>>,
    basic: Option<Basic>,
    forward: Option<Forwarder>,
    /// Where passwords are hashed: the gateway's pool.
    hashing: Arc<HashPool>,
    /// The query arguments that may carry a credential (`keys.query`, `jwt.token_from`).
    query_names: Vec<String>,
    /// What it did.
    pub counters: Arc<AuthCounters>,
    /// The cost of each password check run, in order (tests count them: no test times one).
    #[cfg(test)]
    checked: std::sync::Mutex<Vec<htpasswd::Cost>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("config", &self.config)
            .finish()
    }
}

impl Authenticator {
    /// Reads the route's files and prepares its clients; starts nothing (see `start`).
    /// Passwords are checked on `hashing`. An error names the file and line and says what to
    /// do.
    pub fn new(config: &Arc<RouteAuth>, hashing: &Arc<HashPool>) -> Result<Self, String> {
        let counters = Arc::new(AuthCounters::default());
        let jwt = config
            .jwt
            .as_ref()
            .map(|j| JwtVerifier::new(j, &counters))
            .transpose()?;
        let keys = config
            .keys
            .as_ref()
            .map(|k| Watched::open(&k.file, ApiKeys::parse, &counters))
            .transpose()?;
        let basic = match &config.basic {
            None => None,
            Some(b) => Some(Basic {
                file: Watched::open(&b.htpasswd, Htpasswd::parse, &counters)?,
                verified: TtlCache::new(b.cache_size),
                salt: random_salt(),
            }),
        };
        let forward = config.forward.as_ref().map(Forwarder::new).transpose()?;
        let key_query = config.keys.as_ref().and_then(|k| k.query.clone());
        let token_query = config.jwt.as_ref().and_then(|j| match &j.token_from {
            TokenSource::Part(HashKey::Query(name)) => Some(name.clone()),
            _ => None,
        });
        Ok(Authenticator {
            config: config.clone(),
            jwt,
            keys,
            basic,
            forward,
            hashing: hashing.clone(),
            query_names: key_query.into_iter().chain(token_query).collect(),
            counters,
            #[cfg(test)]
            checked: Default::default(),
        })
    }

    /// Whether it checks passwords on `hashing` (a reload keeps it only while it does).
    pub fn hashes_on(&self, hashing: &Arc<HashPool>) -> bool {
        Arc::ptr_eq(&self.hashing, hashing)
    }

    /// The query arguments that may carry a credential: masked in logs and traces, and
    /// removed from the target sent upstream unless `forward_credential` (see [`query`]).
    pub fn query_credentials(&self) -> &[String] {
        &self.query_names
    }

    /// Starts the JWKS fetches and the file watchers (on the current Tokio runtime).
    pub fn start(&self) {
        if let Some(j) = &self.jwt {
            j.start();
        }
        if let Some(k) = &self.keys {
            k.start();
        }
        if let Some(b) = &self.basic {
            b.file.start();
        }
    }

    /// The request headers an identity may set upstream (`claims_to_headers`, the
    /// service's `upstream_headers`): a client's own copies are removed before they are set,
    /// and its underscore spellings of them (`X_User`) where a listener keeps those.
    pub fn identity_headers(&self) -> impl Iterator<Item = &HeaderName> + Clone {
        let claims = self
            .config
            .jwt
            .iter()
            .flat_map(|j| j.claims_to_headers.iter().map(|(_, h)| h));
        let forwarded = self
            .config
            .forward
            .iter()
            .flat_map(|f| f.upstream_headers.iter());
        claims.chain(forwarded)
    }

    /// The request headers other than `Authorization` that carry the route's credential (the
    /// API key's header, a JWT's `token_from = "header:NAME"`): a request with two of one is
    /// refused, as with two `Authorization` fields, where the gateway would verify one and
    /// the origin might read the other.
    pub fn credential_headers(&self) -> impl Iterator<Item = &str> {
        let key = self.config.keys.iter().map(|k| k.header.as_str());
        let token = self.config.jwt.iter().filter_map(|j| match &j.token_from {
            sluice_config::TokenSource::Part(sluice_config::HashKey::Header(h)) => Some(h.as_str()),
            _ => None,
        });
        key.chain(token)
    }

    /// The names of the route's API keys; `None` without `keys`.
    pub fn key_names(&self) -> Option<Vec<String>> {
        Some(self.keys.as_ref()?.current().0.names())
    }

    /// Adds `key` (its hash) as `name` to the route's key file, or removes `name` (`key`
    /// `None`), then reads the file again at once. Blocking file I/O: call it off the event
    /// loop. `Err(None)`: the route has no `keys`.
    pub fn edit_key(&self, name: &str, key: Option<&[u8]>) -> Result<(), Option<KeyEditError>> {
        let (Some(file), Some(cfg)) = (&self.keys, &self.config.keys) else {
            return Err(None);
        };
        api_keys::edit(&cfg.file, name, key).map_err(Some)?;
        file.check();
        Ok(())
    }

    /// Decides who `req` comes from, or how it is refused (counted either way).
    pub async fn authenticate(&self, req: &Presented<'_>) -> Result<Identity, Denial> {
        let mut first: Option<(Arc<str>, &'static str)> = None;
        let mut headers = Vec::new();
        let mut refusal: Option<Denial> = None;
        for (i, method) in METHODS.iter().enumerate() {
            let verdict = match i {
                0 if self.config.cert.is_some() => self.cert(req),
                1 if self.jwt.is_some() => self.jwt(req).await,
                2 if self.keys.is_some() => self.key(req),
                3 if self.basic.is_some() => self.basic(req).await,
                4 if self.forward.is_some() => self.forward(req).await,
                _ => continue,
            };
            match verdict {
                Verdict::Pass(subject, extra) => {
                    self.counters.allow(i);
                    headers.extend(extra);
                    first.get_or_insert((subject, *method));
                    if !self.config.all {
                        break;
                    }
                }
                Verdict::Absent if self.config.all => {
                    refusal.get_or_insert(self.missing());
                    break;
                }
                Verdict::Absent => {}
                Verdict::Fail(denial) => {
                    refusal.get_or_insert(denial);
                    if self.config.all {
                        break;
                    }
                }
            }
        }
        if let Some((subject, method)) = first
            && (refusal.is_none() || !self.config.all)
        {
            return Ok(Identity {
                subject,
                method,
                headers,
            });
        }
        let denial = refusal.unwrap_or_else(|| self.missing());
        self.counters.refuse(denial.reason);
        Err(denial)
    }

    /// 401 for a request that presented nothing: every method's challenge.
    fn missing(&self) -> Denial {
        let mut headers = HeaderMap::new();
        let realm = &self.config.realm;
        if self.jwt.is_some() {
            push_challenge(&mut headers, format!("Bearer realm=\"{realm}\""));
        }
        if self.keys.is_some() {
            push_challenge(&mut headers, format!("ApiKey realm=\"{realm}\""));
        }
        if self.basic.is_some() {
            push_challenge(
                &mut headers,
                format!("Basic realm=\"{realm}\", charset=\"UTF-8\""),
            );
        }
        // A route that takes client certificates only has nothing to challenge: 403.
        let status = if headers.is_empty() {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::UNAUTHORIZED
        };
        Denial {
            status,
            headers,
            reason: Reason::Missing,
        }
    }

    /// The connection's verified certificate, if its subject and subjectAltNames are ones
    /// the route accepts; the subject is the certificate's.
    fn cert(&self, req: &Presented<'_>) -> Verdict {
        let (Some(want), Some(cert)) = (&self.config.cert, req.client_cert) else {
            return Verdict::Absent;
        };
        let subject_ok =
            want.subjects.is_empty() || want.subjects.iter().any(|s| s == cert.subject);
        let san_ok = want.sans.is_empty() || cert.sans.iter().any(|s| want.sans.contains(s));
        if subject_ok && san_ok {
            Verdict::Pass(Arc::from(cert.subject), Vec::new())
        } else {
            Verdict::Fail(Denial {
                status: StatusCode::FORBIDDEN,
                headers: HeaderMap::new(),
                reason: Reason::CertNotAllowed,
            })
        }
    }

    async fn jwt(&self, req: &Presented<'_>) -> Verdict {
        let Some(verifier) = &self.jwt else {
            return Verdict::Absent;
        };
        let token = match &verifier.config.token_from {
            TokenSource::Bearer => req
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|v| scheme_value(v.as_bytes(), b"bearer")),
            TokenSource::Part(key) => (req.part)(key),
        };
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Verdict::Absent;
        };
        match verifier.verify(token).await {
            Ok(claims) => {
                let subject = claims.subject.clone().unwrap_or_else(|| Arc::from(""));
                Verdict::Pass(subject, claims.headers.clone())
            }
            Err(e) => {
                let mut headers = HeaderMap::new();
                push_challenge(
                    &mut headers,
                    format!(
                        "Bearer realm=\"{}\", error=\"invalid_token\", error_description=\"{}\"",
                        self.config.realm,
                        e.description()
                    ),
                );
                Verdict::Fail(Denial {
                    status: StatusCode::UNAUTHORIZED,
                    headers,
                    reason: Reason::Token(e),
                })
            }
        }
    }

    fn key(&self, req: &Presented<'_>) -> Verdict {
        let (Some(file), Some(cfg)) = (&self.keys, &self.config.keys) else {
            return Verdict::Absent;
        };
        let presented = req
            .headers
            .get(&cfg.header)
            .map(HeaderValue::as_bytes)
            .or_else(|| {
                cfg.query
                    .as_ref()
                    .and_then(|q| (req.part)(&HashKey::Query(q.clone())))
            });
        let Some(key) = presented.filter(|k| !k.is_empty()) else {
            return Verdict::Absent;
        };
        match file.current().0.name_of(key) {
            Some(name) => Verdict::Pass(name.clone(), Vec::new()),
            None => Verdict::Fail(Denial {
                reason: Reason::UnknownKey,
                ..self.missing()
            }),
        }
    }

    async fn basic(&self, req: &Presented<'_>) -> Verdict {
        let Some(basic) = &self.basic else {
            return Verdict::Absent;
        };
        let Some(encoded) = req
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| scheme_value(v.as_bytes(), b"basic"))
        else {
            return Verdict::Absent;
        };
        let refuse = |reason| {
            Verdict::Fail(Denial {
                reason,
                ..self.missing()
            })
        };
        use base64::Engine as _;
        let Some((user, password)) = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|d| String::from_utf8(d).ok())
            .and_then(|t| t.split_once(':').map(|(u, p)| (u.to_owned(), p.to_owned())))
        else {
            return refuse(Reason::MalformedBasic);
        };
        let (users, generation) = basic.file.current();
        // An unknown user's password is checked too, against the file's costliest hash, and
        // refused whatever it says: the name cannot be learnt from the time a refusal takes.
        let (stored, known) = match (users.users.get(&user), &users.decoy) {
            (Some(stored), _) => (stored.clone(), true),
            (None, Some(decoy)) => (decoy.clone(), false),
            (None, None) => return refuse(Reason::BadPassword),
        };
        let mut key = user.as_bytes().to_vec();
        key.push(0);
        key.extend_from_slice(&api_keys::digest(
            &[&basic.salt[..], password.as_bytes()].concat(),
        ));
        let now = unix_now();
        if let Some(subject) = basic.verified.get(&key, generation, now) {
            return Verdict::Pass(subject, Vec::new());
        }
        match self.check_password(stored, password).await {
            Ok(true) if known => {}
            Ok(_) => return refuse(Reason::BadPassword),
            Err(Busy) => {
                return Verdict::Fail(Denial {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    headers: HeaderMap::new(),
                    reason: Reason::HashQueueFull,
                });
            }
        }
        let subject: Arc<str> = Arc::from(user);
        basic
            .verified
            .put(&key, subject.clone(), now + 3600, generation);
        Verdict::Pass(subject, Vec::new())
    }

    /// Whether `password` hashes to `stored`: bcrypt and apr1 (milliseconds) on the
    /// gateway's pool, never on the event loop; `Busy` when the pool is full (nothing
    /// hashed). Each hash is counted.
    async fn check_password(&self, stored: Stored, password: String) -> Result<bool, Busy> {
        #[cfg(test)]
        let cost = stored.cost();
        let checked = if stored.is_slow() {
            self.hashing
                .run(move || stored.verify(password.as_bytes()))
                .await
        } else {
            Ok(stored.verify(password.as_bytes()))
        };
        if checked.is_ok() {
            #[cfg(test)]
            self.checked.lock().unwrap().push(cost);
            self.counters
                .passwords_hashed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        checked
    }

    async fn forward(&self, req: &Presented<'_>) -> Verdict {
        let Some(fwd) = &self.forward else {
            return Verdict::Absent;
        };
        let original = Original {
            method: req.method,
            uri: req.uri,
            headers: req.headers,
            host: req.host,
            https: req.https,
            client: req.client,
        };
        let (decision, cached) = fwd.decide(&original).await;
        if cached {
            self.counters
                .forward_cached
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        match decision {
            Decision::Allow(subject, headers) => {
                Verdict::Pass(subject.unwrap_or_else(|| Arc::from("")), headers.to_vec())
            }
            Decision::Deny(status, headers) => {
                let mut map = HeaderMap::new();
                for (k, v) in headers.iter() {
                    map.append(k.clone(), v.clone());
                }
                Verdict::Fail(Denial {
                    status,
                    headers: map,
                    reason: Reason::ForwardDenied,
                })
            }
            Decision::Error(e) => {
                tracing::warn!(url = %fwd_url(self), "forward authentication failed: {e}");
                let allow = self
                    .config
                    .forward
                    .as_ref()
                    .is_some_and(|f| f.allow_on_error);
                if allow {
                    self.counters
                        .forward_failed_open
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Verdict::Pass(Arc::from(""), Vec::new())
                } else {
                    Verdict::Fail(Denial {
                        status: StatusCode::INTERNAL_SERVER_ERROR,
                        headers: HeaderMap::new(),
                        reason: Reason::ForwardError,
                    })
                }
            }
        }
    }
}

fn fwd_url(a: &Authenticator) -> String {
    a.config
        .forward
        .as_ref()
        .map_or_else(String::new, |f| f.url.to_string())
}

fn push_challenge(headers: &mut HeaderMap, text: String) {
    if let Ok(v) = HeaderValue::try_from(text) {
        headers.append(header::WWW_AUTHENTICATE, v);
    }
}

/// The credentials after `scheme` (compared without case, RFC 9110 §11.1) in an
/// `Authorization` value.
fn scheme_value<'v>(value: &'v [u8], scheme: &[u8]) -> Option<&'v [u8]> {
    let n = scheme.len();
    (value.len() > n && value[..n].eq_ignore_ascii_case(scheme) && value[n] == b' ')
        .then(|| value[n + 1..].trim_ascii())
}

fn random_salt() -> [u8; 16] {
    let mut salt = [0u8; 16];
    boring::rand::rand_bytes(&mut salt).expect("BoringSSL's RNG");
    salt
}

/// The authenticators of `routes` (those with `[route.auth]`), by route name: the old one
/// where its settings are the same (its caches, JWKS and watchers go on), else a new one,
/// started. An error names the route, the file and the line.
pub fn build(
    routes: &[Arc<sluice_config::Route>],
    old: &HashMap<String, Arc<Authenticator>>,
    hashing: &Arc<HashPool>,
) -> Result<HashMap<String, Arc<Authenticator>>, String> {
    let mut made = HashMap::new();
    for r in routes {
        let Some(cfg) = &r.auth else { continue };
        let a = match old.get(&r.name) {
            Some(a) if *a.config == **cfg && a.hashes_on(hashing) => a.clone(),
            _ => {
                let a = Arc::new(
                    Authenticator::new(cfg, hashing)
                        .map_err(|e| format!("route `{}`: {e}", r.name))?,
                );
                a.start();
                a
            }
        };
        made.insert(r.name.clone(), a);
    }
    Ok(made)
}

/// What `sluice check` says about the routes' key, htpasswd and JWT files: every problem,
/// each with the route, the file and the line.
pub fn check(routes: &[Arc<sluice_config::Route>]) -> Vec<String> {
    // Nothing is hashed here: the pool starts no thread.
    let hashing = Arc::new(HashPool::default());
    routes
        .iter()
        .filter_map(|r| {
            let cfg = r.auth.as_ref()?;
            Authenticator::new(cfg, &hashing)
                .err()
                .map(|e| format!("route `{}`: {e}", r.name))
        })
        .collect()
}

/// The same for the MQTT listeners' `[listener.mqtt.auth]` files.
pub fn check_listeners(listeners: &[sluice_config::Listener]) -> Vec<String> {
    let hashing = Arc::new(HashPool::default());
    listeners
        .iter()
        .filter_map(|l| {
            let sluice_config::ListenerKind::Mqtt(m) = &l.kind else {
                return None;
            };
            Authenticator::new(m.auth.as_ref()?, &hashing)
                .err()
                .map(|e| format!("listener `{}` [listener.mqtt.auth]: {e}", l.name))
        })
        .collect()
}

#[cfg(test)]
mod tests;
