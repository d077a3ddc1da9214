use crate::support::*;

#[tokio::test]
async fn requests_go_by_host_and_path_and_unmatched_ones_get_404() {
    let a = Origin::start("A").await;
    let b = Origin::start("B").await;
    let cfg = format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "a"
servers = [{{ address = "{a}" }}]
[[upstream]]
name = "b"
servers = [{{ address = "{b}" }}]
[[route]]
name = "a-host"
hosts = ["a.test"]
upstream = "a"
[[route]]
name = "b-api"
hosts = ["*.b.test"]
path_prefix = "/api/"
upstream = "b"
[[route]]
name = "b-exact"
hosts = ["*.b.test"]
path_exact = "/status"
upstream = "a"
"#,
        a = a.addr,
        b = b.addr
    );
    let gw = TestGateway::plain(&cfg).await;
    let addr = gw.addr("http");
    assert_eq!(http1_get(addr, "a.test", "/x").await.body, "A /x");
    assert_eq!(
        http1_get(addr, "A.TEST:80", "/y").await.body,
        "A /y",
        "host compared without case and port"
    );
    assert_eq!(
        http1_get(addr, "www.b.test", "/api/v1").await.body,
        "B /api/v1"
    );
    assert_eq!(
        http1_get(addr, "www.b.test", "/status").await.body,
        "A /status"
    );
    let miss = http1_get(addr, "www.b.test", "/other").await;
    assert_eq!(miss.status, 404);
    assert_eq!(
        http1_get(addr, "b.test", "/api/v1").await.status,
        404,
        "wildcard needs a label"
    );
    assert_eq!(
        http1_get(addr, "c.test", "/").await.status,
        404,
        "no default route"
    );
}
