use super::*;
use crate::jwt::tests::sign;
use boring::ec::{EcGroup, EcKey};
use boring::nid::Nid;
use boring::pkey::PKey;
use sluice_config::{BasicAuth, JwtAuth, KeyAuth};
use std::time::Duration;

struct Scene {
    dir: tempfile::TempDir,
    key: PKey<boring::pkey::Private>,
}

impl Scene {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        let key = PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
        std::fs::write(
            dir.path().join("keys.pem"),
            key.public_key_to_pem().unwrap(),
        )
        .unwrap();
        // htpasswd -nbs bob secret
        std::fs::write(
            dir.path().join("users"),
            "bob:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("api-keys"),
            format!("{}\n", key_line("mobile", b"k-0123456789abcdef")),
        )
        .unwrap();
        Scene { dir, key }
    }

    fn auth(&self, all: bool) -> Authenticator {
        self.auth_with(all, true)
    }

    fn auth_with(&self, all: bool, with_basic: bool) -> Authenticator {
        self.auth_tuned(all, with_basic, |_| {})
    }

    /// The scene's authenticator with its JWT settings changed by `tune`.
    fn auth_tuned(
        &self,
        all: bool,
        with_basic: bool,
        tune: impl FnOnce(&mut JwtAuth),
    ) -> Authenticator {
        let p = self.dir.path();
        let mut jwt = JwtAuth {
            jwks_url: None,
            jwks_ca: None,
            keys_file: Some(p.join("keys.pem")),
            issuer: Some("https://idp.example".into()),
            audiences: vec![],
            algorithms: vec!["ES256".into()],
            claims_to_headers: vec![("email".into(), HeaderName::from_static("x-email"))],
            leeway: Duration::from_secs(0),
            token_from: TokenSource::Bearer,
            cache_size: 100,
            required_claims: vec![],
            max_token_size: 8192,
        };
        tune(&mut jwt);
        let config = RouteAuth {
            cert: None,
            jwt: Some(Arc::new(jwt)),
            keys: Some(Arc::new(KeyAuth {
                file: p.join("api-keys"),
                header: HeaderName::from_static("x-api-key"),
                query: Some("api_key".into()),
            })),
            basic: with_basic.then(|| {
                Arc::new(BasicAuth {
                    htpasswd: p.join("users"),
                    cache_size: 100,
                })
            }),
            forward: None,
            all,
            subject_header: Some(HeaderName::from_static("x-auth-subject")),
            realm: "api".into(),
            forward_credential: false,
        };
        Authenticator::new(&Arc::new(config), &Arc::new(HashPool::default())).unwrap()
    }

    fn token(&self, exp: u64) -> String {
        let claims = format!(
            r#"{{"iss":"https://idp.example","sub":"alice","email":"a@example.com","exp":{exp}}}"#
        );
        sign("ES256", None, &self.key, &claims)
    }
}

fn run(a: &Authenticator, headers: &[(&str, &str)], uri: &str) -> Result<Identity, Denial> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        map.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let uri: Uri = uri.parse().unwrap();
    let query = |key: &HashKey| -> Option<&[u8]> {
        let HashKey::Query(name) = key else {
            return None;
        };
        uri.query()?.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name).then_some(v.as_bytes())
        })
    };
    let req = Presented {
        client_cert: None,
        method: &Method::GET,
        uri: &uri,
        headers: &map,
        host: "api.example",
        https: true,
        client: "192.0.2.1".parse().unwrap(),
        part: &query,
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(a.authenticate(&req))
}

#[test]
fn any_method_that_accepts_decides_and_names_the_subject() {
    let s = Scene::new();
    let a = s.auth(false);
    let token = s.token(unix_now() + 600);
    let id = run(&a, &[("authorization", &format!("Bearer {token}"))], "/").unwrap();
    assert_eq!((&*id.subject, id.method), ("alice", "jwt"));
    assert_eq!(
        id.headers,
        [(
            HeaderName::from_static("x-email"),
            HeaderValue::from_static("a@example.com")
        )]
    );
    // The same token again: from the cache, no second signature.
    run(&a, &[("authorization", &format!("bearer {token}"))], "/").unwrap();
    assert_eq!(
        a.counters
            .signatures_verified
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let id = run(&a, &[("x-api-key", "k-0123456789abcdef")], "/").unwrap();
    assert_eq!((&*id.subject, id.method), ("mobile", "key"));
    let id = run(&a, &[], "/x?api_key=k-0123456789abcdef").unwrap();
    assert_eq!(&*id.subject, "mobile");
    // bob:secret
    let id = run(&a, &[("authorization", "Basic Ym9iOnNlY3JldA==")], "/").unwrap();
    assert_eq!((&*id.subject, id.method), ("bob", "basic"));
}

#[test]
fn refusals_say_why_with_rfc_6750_challenges() {
    let s = Scene::new();
    let a = s.auth(false);
    let d = run(&a, &[], "/").unwrap_err();
    assert_eq!(
        (d.status, d.reason),
        (StatusCode::UNAUTHORIZED, Reason::Missing)
    );
    let challenges: Vec<_> = d.headers.get_all(header::WWW_AUTHENTICATE).iter().collect();
    assert_eq!(challenges.len(), 3);
    assert_eq!(challenges[0], "Bearer realm=\"api\"");
    assert_eq!(challenges[2], "Basic realm=\"api\", charset=\"UTF-8\"");
    let expired = s.token(unix_now() - 1);
    let d = run(&a, &[("authorization", &format!("Bearer {expired}"))], "/").unwrap_err();
    assert_eq!(d.reason, Reason::Token(TokenError::Expired));
    assert_eq!(
        d.headers[header::WWW_AUTHENTICATE],
        "Bearer realm=\"api\", error=\"invalid_token\", error_description=\"the token expired\""
    );
    let d = run(&a, &[("authorization", "Basic Ym9iOndyb25n")], "/").unwrap_err();
    assert_eq!(d.reason, Reason::BadPassword);
    let d = run(&a, &[("authorization", "Basic !!!")], "/").unwrap_err();
    assert_eq!(d.reason, Reason::MalformedBasic);
    let d = run(&a, &[("x-api-key", "nope")], "/").unwrap_err();
    assert_eq!(d.reason, Reason::UnknownKey);
    let refused: u64 = a.counters.refusals().map(|(_, n)| n).sum();
    assert_eq!(refused, 5);
}

/// `jwt.require` refuses a token without a listed claim, and `jwt.max_token_size` one past
/// the size, both as bad tokens (401 `invalid_token`), counted by reason.
#[test]
fn required_claims_and_the_token_size_are_the_routes() {
    let s = Scene::new();
    let strict = s.auth_tuned(false, false, |j| j.required_claims = vec!["nbf".into()]);
    let token = s.token(unix_now() + 600);
    let d = run(
        &strict,
        &[("authorization", &format!("Bearer {token}"))],
        "/",
    )
    .unwrap_err();
    assert_eq!(d.reason, Reason::Token(TokenError::MissingClaim));
    let lax = s.auth_tuned(false, false, |_| {});
    assert!(run(&lax, &[("authorization", &format!("Bearer {token}"))], "/").is_ok());
    let small = s.auth_tuned(false, false, |j| j.max_token_size = token.len() - 1);
    let d = run(
        &small,
        &[("authorization", &format!("Bearer {token}"))],
        "/",
    )
    .unwrap_err();
    assert_eq!(d.reason, Reason::Token(TokenError::Malformed));
}

#[test]
fn all_needs_every_method() {
    let s = Scene::new();
    let a = s.auth(true);
    let token = s.token(unix_now() + 600);
    let bearer = format!("Bearer {token}");
    // A token and a key, but no basic credentials: refused.
    let d = run(
        &a,
        &[
            ("authorization", &bearer),
            ("x-api-key", "k-0123456789abcdef"),
        ],
        "/",
    )
    .unwrap_err();
    assert_eq!(d.reason, Reason::Missing);
    // Without basic: a token and a key are both needed; the subject is the token's.
    let a = s.auth_with(true, false);
    let id = run(
        &a,
        &[
            ("authorization", &bearer),
            ("x-api-key", "k-0123456789abcdef"),
        ],
        "/",
    )
    .unwrap();
    assert_eq!((&*id.subject, id.method), ("alice", "jwt"));
    let d = run(
        &a,
        &[("authorization", &bearer), ("x-api-key", "wrong")],
        "/",
    )
    .unwrap_err();
    assert_eq!(d.reason, Reason::UnknownKey);
    let d = run(&a, &[("x-api-key", "k-0123456789abcdef")], "/").unwrap_err();
    assert_eq!(d.reason, Reason::Missing);
}

/// A route with basic authentication only, on `hashing`: alice's bcrypt (cost 5) and bob's
/// SHA-1 entries, password "secret" each (Apache's `htpasswd -B` and `-s`).
fn basic_only(dir: &std::path::Path, hashing: &Arc<HashPool>) -> Authenticator {
    let file = dir.join("users");
    std::fs::write(
        &file,
        "bob:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n\
         alice:$2y$05$Xcl/aAsnwSTbu0tlVkY/k..WfLCrLQM5fEdyWxXjU96auSWfaPHe.\n",
    )
    .unwrap();
    let config = RouteAuth {
        cert: None,
        jwt: None,
        keys: None,
        basic: Some(Arc::new(BasicAuth {
            htpasswd: file,
            cache_size: 100,
        })),
        forward: None,
        all: false,
        subject_header: None,
        realm: "api".into(),
        forward_credential: false,
    };
    Authenticator::new(&Arc::new(config), hashing).unwrap()
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// An unknown user costs what a wrong password does: one check, against a hash of the
/// file's highest cost (bcrypt 5 here, not bob's SHA-1). Counted, never timed.
#[test]
fn an_unknown_user_costs_one_check_at_the_files_highest_cost() {
    let dir = tempfile::tempdir().unwrap();
    let a = basic_only(dir.path(), &Arc::new(HashPool::default()));
    let hashed = || {
        a.counters
            .passwords_hashed
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let d = run(&a, &[("authorization", &basic("alice", "wrong"))], "/").unwrap_err();
    assert_eq!(d.reason, Reason::BadPassword);
    let known: Vec<_> = a.checked.lock().unwrap().drain(..).collect();
    assert_eq!(known, [htpasswd::Cost::Bcrypt(5)]);
    assert_eq!(hashed(), 1);
    let d = run(&a, &[("authorization", &basic("mallory", "wrong"))], "/").unwrap_err();
    assert_eq!(
        (d.status, d.reason),
        (StatusCode::UNAUTHORIZED, Reason::BadPassword)
    );
    let unknown: Vec<_> = a.checked.lock().unwrap().drain(..).collect();
    assert_eq!(unknown, known, "the same number of checks at the same cost");
    assert_eq!(hashed(), 2);
    // alice's password under another name is still refused.
    let d = run(&a, &[("authorization", &basic("mallory", "secret"))], "/").unwrap_err();
    assert_eq!(d.reason, Reason::BadPassword);
    let id = run(&a, &[("authorization", &basic("alice", "secret"))], "/").unwrap();
    assert_eq!(&*id.subject, "alice");
}

/// With the pool's one thread held and no queue, a bcrypt check is refused at once with
/// 503, counted as `hash_queue_full`; SHA-1 entries, checked inline, still pass.
#[test]
fn a_full_hashing_pool_answers_503_and_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(HashPool::new(sluice_config::AuthSettings {
        hash_threads: std::num::NonZeroUsize::MIN,
        hash_queue: 0,
    }));
    let a = basic_only(dir.path(), &pool);
    let (open, gate) = std::sync::mpsc::channel::<()>();
    let holder = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(pool.run(move || gate.recv().is_ok()))
        })
    };
    while pool.in_flight() < 1 {
        std::thread::yield_now();
    }
    let d = run(&a, &[("authorization", &basic("alice", "secret"))], "/").unwrap_err();
    assert_eq!(
        (d.status, d.reason),
        (StatusCode::SERVICE_UNAVAILABLE, Reason::HashQueueFull)
    );
    let full = a
        .counters
        .refusals()
        .find(|(r, _)| *r == "hash_queue_full")
        .map(|(_, n)| n);
    assert_eq!(full, Some(1));
    let hashed = || {
        a.counters
            .passwords_hashed
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(hashed(), 0, "a refused check hashed nothing");
    run(&a, &[("authorization", &basic("bob", "secret"))], "/").unwrap();
    assert_eq!(hashed(), 1);
    open.send(()).unwrap();
    assert_eq!(holder.join().unwrap(), Ok(true));
    run(&a, &[("authorization", &basic("alice", "secret"))], "/").unwrap();
}

#[test]
fn query_credentials_are_the_key_and_token_arguments() {
    let s = Scene::new();
    let a = s.auth(false);
    assert_eq!(
        a.query_credentials(),
        ["api_key"],
        "a bearer token is no argument"
    );
    let mut cfg = (*a.config).clone();
    let mut jwt = (**cfg.jwt.as_ref().unwrap()).clone();
    jwt.token_from = TokenSource::Part(HashKey::Query("access_token".into()));
    cfg.jwt = Some(Arc::new(jwt));
    let b = Authenticator::new(&Arc::new(cfg), &Arc::new(HashPool::default())).unwrap();
    assert_eq!(b.query_credentials(), ["api_key", "access_token"]);
}
