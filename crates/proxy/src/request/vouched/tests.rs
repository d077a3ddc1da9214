use super::*;
use http::HeaderValue;

fn map(pairs: &[(&str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            )
        })
        .collect()
}

fn names(h: &HeaderMap) -> Vec<&str> {
    let mut n: Vec<_> = h.keys().map(HeaderName::as_str).collect();
    n.sort_unstable();
    n
}

#[test]
fn a_second_authorization_or_proxy_authorization_is_refused() {
    for (pairs, why) in [
        (
            &[("authorization", "Bearer a"), ("authorization", "Bearer b")][..],
            "duplicate_authorization",
        ),
        (
            &[
                ("proxy-authorization", "Basic a"),
                ("proxy-authorization", "Basic b"),
            ][..],
            "duplicate_proxy_authorization",
        ),
        // Equal values are two fields all the same.
        (
            &[("authorization", "Bearer a"), ("authorization", "Bearer a")][..],
            "duplicate_authorization",
        ),
    ] {
        let mut h = map(pairs);
        assert_eq!(screen(&mut h, false, false), Err(why), "{pairs:?}");
        assert_eq!(screen(&mut h, true, true), Err(why), "{pairs:?}");
    }
    // One of each is a request like any other.
    let mut h = map(&[
        ("authorization", "Bearer a"),
        ("proxy-authorization", "Basic b"),
    ]);
    assert_eq!(screen(&mut h, false, false), Ok(()));
    assert_eq!(h.len(), 2);
}

#[test]
fn underscored_names_go_unless_the_listener_keeps_them() {
    let pairs = [
        ("x_custom", "1"),
        ("x-custom", "2"),
        ("x_auth_subject", "admin"),
        ("host", "a"),
    ];
    let mut h = map(&pairs);
    assert_eq!(screen(&mut h, false, false), Ok(()));
    assert_eq!(names(&h), ["host", "x-custom"]);
    let mut h = map(&pairs);
    assert_eq!(screen(&mut h, true, false), Ok(()));
    // The route's subject header is dropped by `drop_spellings` when authentication runs.
    assert_eq!(
        names(&h),
        ["host", "x-custom", "x_auth_subject", "x_custom"]
    );
}

#[test]
fn underscore_spellings_of_the_gateways_fields_always_go() {
    for name in [
        "x_forwarded_for",
        "x_forwarded-proto",
        "x-forwarded_host",
        "x_real_ip",
        "x_request_id",
        "x_forwarded_client_cert",
    ] {
        for keep in [false, true] {
            let mut h = map(&[(name, "forged"), ("x_kept", "1")]);
            assert_eq!(screen(&mut h, keep, true), Ok(()));
            assert!(!h.contains_key(name), "{name} keep={keep}");
            assert_eq!(h.contains_key("x_kept"), keep, "{name}");
        }
    }
}

#[test]
fn a_routes_own_fields_lose_their_underscore_spellings() {
    let subject = HeaderName::from_static("x-auth-subject");
    let claim = HeaderName::from_static("x-user-email");
    let mut h = map(&[
        ("x_auth_subject", "admin"),
        ("x_auth-subject", "admin"),
        ("x_user_email", "a@evil"),
        ("x_auth_subjects", "kept"),
        ("x_other", "kept"),
    ]);
    drop_spellings(&mut h, [&subject, &claim].into_iter());
    assert_eq!(names(&h), ["x_auth_subjects", "x_other"]);
}

#[test]
fn connection_spares_the_gateways_request_id_and_the_messages_own_fields() {
    let pairs = [
        (
            "connection",
            "close, X-Request-Id, Host, Content-Length, X-Forwarded-For, X-Private",
        ),
        ("x-request-id", "made-here"),
        ("host", "a"),
        ("content-length", "0"),
        ("x-forwarded-for", "192.0.2.1"),
        ("x-private", "1"),
    ];
    let mut h = map(&pairs);
    assert_eq!(screen(&mut h, false, true), Ok(()));
    assert_eq!(
        names(&h),
        ["connection", "content-length", "host", "x-request-id"]
    );
    // Without the gateway's own request ID, the client's is an option like any other.
    let mut h = map(&pairs);
    assert_eq!(screen(&mut h, false, false), Ok(()));
    assert!(!h.contains_key("x-request-id"));
}

#[test]
fn field_names_compare_with_underscore_as_dash() {
    assert!(same_field("x_auth_subject", "x-auth-subject"));
    assert!(same_field("x-auth-subject", "x_auth_subject"));
    assert!(!same_field("x_auth_subjec", "x-auth-subject"));
    assert!(!same_field("x_auth.subject", "x-auth-subject"));
}
