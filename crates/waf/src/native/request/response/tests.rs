//! Response variables and the response phases beside libmodsecurity: the same rules (one
//! per variable, logging what it saw) on both engines, with responses that reach each
//! branch of `appendResponseBody` and `processResponseBody` (type listed or not, compared
//! with case, with and without `SecResponseBodyMimeType`, over the limit in part or
//! rejected, a phase 3 deny).

use crate::facts::{RequestFacts, ResponseFacts};
use crate::inspect::{inspect, inspect_response};
use crate::native::session::inspect_native;
use crate::native::{NativeRules, load};
use crate::rules::Piece;
use crate::{Rules, Verdict};
use bytes::Bytes;
use std::sync::Arc;

/// A rule per response variable, each logging its name and value.
const RULES: &str = r#"
SecRule RESPONSE_STATUS "@rx ^" "id:11,phase:3,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule RESPONSE_PROTOCOL "@rx ^" "id:12,phase:3,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule RESPONSE_CONTENT_TYPE "@rx ^" "id:13,phase:3,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule RESPONSE_HEADERS "@rx ^" "id:14,phase:3,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule RESPONSE_HEADERS_NAMES "@rx ^" "id:15,phase:3,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule &RESPONSE_HEADERS:X-Twice "@eq 2" "id:16,phase:3,pass,log,logdata:'two'"
SecRule RESPONSE_HEADERS:X-Twice "@rx ^" "id:17,phase:3,pass,log,logdata:'%{MATCHED_VAR}'"
SecRule RESPONSE_BODY "@rx ^" "id:21,phase:4,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule RESPONSE_CONTENT_LENGTH "@rx ^" "id:22,phase:4,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule OUTBOUND_DATA_ERROR "@rx ^" "id:23,phase:4,pass,log,logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule RESPONSE_CONTENT_TYPE "@rx ^" "id:24,phase:4,pass,log,logdata:'%{MATCHED_VAR}'"
SecRule RESPONSE_HEADERS:X-Leak "@contains secret" "id:31,phase:3,deny,status:502,log"
SecRule RESPONSE_BODY "@contains LEAK" "id:41,phase:4,deny,status:503,log"
SecRule TX:seen "@eq 1" "id:51,phase:3,pass,log,logdata:'request TX'"
SecAction "id:1,phase:1,pass,nolog,setvar:tx.seen=1"
"#;

fn request() -> RequestFacts {
    RequestFacts {
        client: "192.0.2.7:40000".parse().unwrap(),
        server: "127.0.0.1:80".parse().unwrap(),
        method: http::Method::GET,
        target: "/page?x=1".into(),
        version: "1.1",
        headers: http::HeaderMap::new(),
        body: Bytes::new(),
        id: "1".into(),
    }
}

fn response(status: u16, headers: &[(&str, &str)], body: &str) -> ResponseFacts {
    let mut map = http::HeaderMap::new();
    for (k, v) in headers {
        map.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    ResponseFacts {
        status,
        protocol: if status == 500 {
            "HTTP 2.0"
        } else {
            "HTTP 1.1"
        },
        headers: map,
        body: Bytes::from(body.to_string()),
        body_limit: 1 << 20,
    }
}

fn responses() -> Vec<ResponseFacts> {
    let html = ("content-type", "text/html; charset=UTF-8");
    vec![
        response(200, &[html, ("x-a", "1"), ("set-cookie", "s=1")], "hello"),
        response(200, &[("content-type", "TEXT/HTML")], "upper case type"),
        response(200, &[("content-type", "application/json")], "{}"),
        response(200, &[], "no type"),
        response(200, &[("content-type", "")], "empty type"),
        response(200, &[("content-type", ";text/html")], "type after ;"),
        response(200, &[html], &"long body ".repeat(10)),
        response(200, &[html], ""),
        response(200, &[html, ("x-leak", "a secret")], "denied in phase 3"),
        response(200, &[html], "a LEAK in the body"),
        response(500, &[html, ("x-twice", "1"), ("x-twice", "2")], "error"),
        response(304, &[("content-type", "text/plain")], "not modified"),
    ]
}

/// The rule ids, data and intervention status of a verdict.
fn summary(v: &Verdict) -> (Vec<(u32, String)>, Option<u16>) {
    let ids = v.matches.iter().map(|m| (m.id, m.data.clone())).collect();
    (ids, v.intervention.as_ref().map(|i| i.status))
}

fn compare(settings: &str) {
    let pieces = [Piece::Text {
        origin: "test.conf".into(),
        text: format!("SecRuleEngine On\nSecRequestBodyAccess On\n{settings}\n{RULES}"),
    }];
    let oracle = Arc::new(Rules::build(&pieces).expect("libmodsecurity loads the rules"));
    let native = Arc::new(NativeRules::new(load(&pieces).expect("native loads them")).unwrap());
    for (i, r) in responses().iter().enumerate() {
        let (_, want) = inspect(&oracle, &request(), true);
        let (_, got) = inspect_native(&native, &request(), true);
        let (w, g) = (
            inspect_response(&mut want.expect("kept"), r),
            inspect_response(&mut got.expect("kept"), r),
        );
        assert_eq!(
            summary(&g),
            summary(&w),
            "settings {settings:?}, response {i}: native, then libmodsecurity"
        );
    }
}

#[test]
fn response_variables_and_phases_are_libmodsecurity_s() {
    compare(
        "SecResponseBodyAccess On\nSecResponseBodyMimeType text/plain text/html\n\
         SecResponseBodyLimit 64\nSecResponseBodyLimitAction ProcessPartial",
    );
    compare(
        "SecResponseBodyAccess On\nSecResponseBodyMimeType text/html\n\
         SecResponseBodyLimit 64\nSecResponseBodyLimitAction Reject",
    );
    // Without SecResponseBodyMimeType every type is inspected.
    compare("SecResponseBodyAccess On");
    // Without response body access there is no phase 4 at all.
    compare("SecResponseBodyAccess Off\nSecResponseBodyMimeType text/html");
    compare("SecResponseBodyAccess On\nSecResponseBodyMimeTypesClear");
}
