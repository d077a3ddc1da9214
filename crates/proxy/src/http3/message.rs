//! HTTP/3 header sections to and from `http` types (RFC 9114 §4.3), checked as strictly as
//! the HTTP/2 server checks its own (hyper/h2): a malformed request is refused, not guessed.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};
use quiche::h3::{Header, NameValue};

/// Why a request's header section was refused (answered 400, RFC 9114 §4.1.2).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

/// Fields that are connection-specific in HTTP/1.1 and malformed in HTTP/3 (§4.2).
static CONNECTION_SPECIFIC: [HeaderName; 5] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// The request a header section describes, with `body` as its body.
pub(crate) fn request<B>(list: &[Header], body: B) -> Result<Request<B>, Malformed> {
    let (mut method, mut scheme, mut authority, mut path) = (None, None, None, None);
    let mut headers = HeaderMap::with_capacity(list.len());
    let mut regular = false;
    for h in list {
        let (name, value) = (h.name(), h.value());
        if let Some(pseudo) = name.strip_prefix(b":") {
            if regular {
                return Err(Malformed("a pseudo-header after a regular field"));
            }
            let slot = match pseudo {
                b"method" => &mut method,
                b"scheme" => &mut scheme,
                b"authority" => &mut authority,
                b"path" => &mut path,
                _ => return Err(Malformed("an unknown pseudo-header")),
            };
            if slot.replace(value).is_some() {
                return Err(Malformed("a repeated pseudo-header"));
            }
            continue;
        }
        regular = true;
        if name.iter().any(u8::is_ascii_uppercase) {
            return Err(Malformed("an upper-case field name"));
        }
        let name = HeaderName::from_bytes(name).map_err(|_| Malformed("an invalid field name"))?;
        let value =
            HeaderValue::from_bytes(value).map_err(|_| Malformed("an invalid field value"))?;
        if CONNECTION_SPECIFIC.contains(&name) {
            return Err(Malformed("a connection-specific field"));
        }
        if name == header::TE && value != "trailers" {
            return Err(Malformed("TE other than \"trailers\""));
        }
        headers.append(name, value);
    }
    let method = Method::from_bytes(method.ok_or(Malformed("no :method"))?)
        .map_err(|_| Malformed("an invalid :method"))?;
    if method == Method::CONNECT {
        return Err(Malformed("CONNECT is not served over HTTP/3"));
    }
    let scheme = scheme.ok_or(Malformed("no :scheme"))?;
    let path = path.ok_or(Malformed("no :path"))?;
    if path.is_empty() {
        return Err(Malformed("an empty :path"));
    }
    // The target as hyper gives HTTP/2 requests: absolute when there is an authority.
    let mut uri = Uri::builder().path_and_query(path);
    if let Some(a) = authority {
        uri = uri.scheme(scheme).authority(a);
        // Host and :authority must agree when both are present (§4.3.1).
        if let Some(host) = headers.get(header::HOST)
            && host.as_bytes() != a
        {
            return Err(Malformed("Host differs from :authority"));
        }
    } else if !headers.contains_key(header::HOST) {
        return Err(Malformed("neither :authority nor Host"));
    }
    let uri = uri
        .build()
        .map_err(|_| Malformed("an invalid request target"))?;
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_3;
    *req.headers_mut() = headers;
    Ok(req)
}

/// The header section of `resp`: `:status`, then its fields less the connection-specific
/// ones (an upstream's HTTP/1.1 `Connection` or `Transfer-Encoding` never reaches the client).
pub(crate) fn response_head(status: StatusCode, headers: &HeaderMap) -> Vec<Header> {
    let mut out = Vec::with_capacity(headers.len() + 1);
    out.push(Header::new(b":status", status.as_str().as_bytes()));
    out.extend(fields(headers));
    out
}

/// A header section's fields (a response head's after `:status`, or trailers), less the
/// connection-specific ones.
pub(crate) fn fields(map: &HeaderMap) -> Vec<Header> {
    map.iter()
        .filter(|(n, _)| !CONNECTION_SPECIFIC.contains(n))
        .map(|(n, v)| Header::new(n.as_str().as_bytes(), v.as_bytes()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(list: &[(&str, &str)]) -> Vec<Header> {
        list.iter()
            .map(|(n, v)| Header::new(n.as_bytes(), v.as_bytes()))
            .collect()
    }

    #[test]
    fn a_well_formed_request_keeps_its_target_and_fields() {
        let req = request(
            &h(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":authority", "example.com"),
                (":path", "/a?b=1"),
                ("accept", "*/*"),
                ("cookie", "a=1"),
                ("cookie", "b=2"),
            ]),
            (),
        )
        .unwrap();
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri(), "https://example.com/a?b=1");
        assert_eq!(req.version(), Version::HTTP_3);
        assert_eq!(req.headers().get_all("cookie").iter().count(), 2);
    }

    #[test]
    fn malformed_requests_are_refused() {
        let base = [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "example.com"),
            (":path", "/"),
        ];
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (base[1..].to_vec(), "no :method"),
            (vec![base[0], base[1], base[2]], "no :path"),
            ([&base[..], &[(":path", "/again")]].concat(), "repeated"),
            ([&base[..], &[(":protocol", "x")]].concat(), "unknown"),
            (
                vec![base[0], base[1], ("accept", "*/*"), base[2], base[3]],
                "after a regular",
            ),
            ([&base[..], &[("Accept", "*/*")]].concat(), "upper-case"),
            (
                [&base[..], &[("connection", "close")]].concat(),
                "connection-specific",
            ),
            (
                [&base[..], &[("transfer-encoding", "chunked")]].concat(),
                "connection-specific",
            ),
            ([&base[..], &[("te", "gzip")]].concat(), "TE"),
            (
                [&base[..], &[("host", "other.example")]].concat(),
                "Host differs",
            ),
            (vec![base[0], base[1], base[3]], "neither"),
            (vec![(":method", "CONNECT"), base[2]], "CONNECT"),
            (
                [&base[..], &[("x", "a\nb")]].concat(),
                "invalid field value",
            ),
        ];
        for (list, why) in cases {
            let got = request(&h(&list), ());
            let Err(Malformed(reason)) = got else {
                panic!("{list:?} was accepted")
            };
            assert!(reason.contains(why), "{list:?}: {reason} (want {why})");
        }
    }

    #[test]
    fn response_heads_drop_connection_specific_fields() {
        let resp = http::Response::builder()
            .status(404)
            .header("content-type", "text/plain")
            .header("connection", "close")
            .header("transfer-encoding", "chunked")
            .body(())
            .unwrap();
        let head = response_head(resp.status(), resp.headers());
        let names: Vec<_> = head.iter().map(|h| h.name().to_vec()).collect();
        assert_eq!(names, vec![b":status".to_vec(), b"content-type".to_vec()]);
        assert_eq!(head[0].value(), b"404");
    }
}
