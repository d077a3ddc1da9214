//! OpenResty scripts as their users write them, one per behaviour family where Sluice once
//! answered otherwise than lua-nginx-module: each runs in Debian's NGINX with
//! lua-nginx-module 0.10.23 (and lua-resty-core) and in Sluice, and the status, the body and
//! the named response headers must be the same.

use crate::differential::{nginx_with, wait_listening};
use crate::support::*;
use std::net::SocketAddr;

/// One case: its location (`/NAME/`), its scripts by phase (OpenResty's phase names
/// without `_by_lua`), the request's path below the location and headers, and the response
/// headers compared. A location without a `content` script proxies to the origin.
struct Case {
    name: &'static str,
    scripts: &'static [(&'static str, &'static str)],
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    compare: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        // lua-nginx-module's documented custom error page.
        name: "status_then_exit_ok",
        scripts: &[(
            "access",
            r#"ngx.status = 503
ngx.say("down for maintenance")
return ngx.exit(ngx.HTTP_OK)"#,
        )],
        path: "whoami",
        headers: &[],
        compare: &["content-type"],
    },
    Case {
        name: "status_then_exit_ok_no_output",
        scripts: &[("content", "ngx.status = 404\nreturn ngx.exit(200)")],
        path: "x",
        headers: &[],
        compare: &[],
    },
    Case {
        name: "exit_after_output_keeps_status",
        scripts: &[("content", "ngx.say('partial')\nreturn ngx.exit(404)")],
        path: "x",
        headers: &[],
        compare: &[],
    },
    Case {
        name: "content_default",
        scripts: &[("content", "ngx.header['X-A'] = 'b'")],
        path: "x?y=1",
        headers: &[],
        // NGINX streams a script's output (no Content-Length); Sluice knows it whole.
        compare: &["x-a"],
    },
    Case {
        name: "content_with_filters",
        scripts: &[
            ("content", "ngx.say('hello ', ngx.var.arg_who)"),
            (
                "header_filter",
                "ngx.header['X-Len'] = ngx.header.content_length or 'none'\nngx.header.content_length = nil",
            ),
            ("body_filter", "ngx.arg[1] = string.upper(ngx.arg[1])"),
        ],
        path: "x?who=ann",
        headers: &[],
        compare: &["x-len"],
    },
    Case {
        name: "builtin_error_is_a_string",
        scripts: &[(
            "content",
            r#"local cjson = require "cjson"
local ok, err = pcall(cjson.decode, "{bad")
ngx.say(ok, " ", type(err))
local ok2, err2 = pcall(ngx.shared.d.set, ngx.shared.d)
ngx.say(ok2, " ", type(err2))
ngx.say("caught: " .. tostring(select(2, pcall(ngx.re.match, "a", {}))) ~= nil)"#,
        )],
        path: "x",
        headers: &[],
        compare: &[],
    },
    Case {
        name: "xpcall_handler_does_not_catch_exit",
        scripts: &[(
            "content",
            r#"xpcall(function()
    ngx.say("in")
    ngx.exit(200)
end, function(e) ngx.say("handler saw ", tostring(e)) return e end)
ngx.say("after")"#,
        )],
        path: "x",
        headers: &[],
        compare: &[],
    },
    Case {
        name: "header_set_in_access_reaches_the_proxied_response",
        scripts: &[
            ("rewrite", "ngx.header['X-From-Rewrite'] = 'r'"),
            ("access", "ngx.header['X-From-Access'] = 'a'"),
        ],
        path: "whoami",
        headers: &[],
        compare: &["x-from-rewrite", "x-from-access"],
    },
    Case {
        name: "filter_only_route_sees_the_request",
        scripts: &[(
            "header_filter",
            r#"local h = ngx.req.get_headers()
ngx.header['X-Seen'] = table.concat({ ngx.req.get_method(), ngx.var.uri, ngx.var.args or "-", ngx.var.arg_a or "-", h["x-probe"] or "-", ngx.var.http_x_probe or "-" }, " ")"#,
        )],
        path: "whoami?a=1&b=2",
        headers: &[("x-probe", "p1")],
        compare: &["x-seen"],
    },
    Case {
        name: "numbers_as_tostring",
        scripts: &[(
            "content",
            r#"ngx.header['X-Num'] = 1/3
ngx.say(0.1, " ", 1/3, " ", 1e15, " ", 1e16, " ", 2^53, " ", 100, " ", -0.5, " ", 123456789012)
ngx.print(3.14159265358979, "\n")"#,
        )],
        path: "x",
        headers: &[],
        compare: &["x-num"],
    },
    Case {
        name: "request_uri_stays_after_set_uri",
        scripts: &[(
            "content",
            r#"ngx.req.set_uri("/other")
ngx.say(ngx.var.request_uri, " ", ngx.var.uri)"#,
        )],
        path: "a?b=1",
        headers: &[],
        compare: &[],
    },
    Case {
        name: "re_options",
        scripts: &[(
            "content",
            r#"local m, err = ngx.re.match("é", [[^\w$]], "u")
ngx.say("w-u: ", m and m[0] or "nil", " ", err or "-")
local m2, err2 = ngx.re.match("\xff", "a", "u")
ngx.say("bad utf8: ", m2 and "match" or "nil", " ", tostring(err2))
local m3, err3 = ngx.re.match("ab", "(?<x>a)|(?<x>b)", "D")
ngx.say("dup: ", m3 and m3[0] or "nil", " ", err3 or "-")
local m4 = ngx.re.match("AB", "ab", "i")
ngx.say("i: ", m4 and m4[0] or "nil")"#,
        )],
        path: "x",
        headers: &[],
        compare: &[],
    },
    Case {
        name: "shared_dict_errors_are_returned",
        scripts: &[(
            "content",
            r#"local d = ngx.shared.d
ngx.say("get empty: ", tostring(select(2, d:get(""))))
ngx.say("set nil key: ", tostring(select(2, d:set(nil, 1))))
d:set("s", "text")
ngx.say("incr text: ", tostring(select(2, d:incr("s", 1))))
ngx.say("incr missing: ", tostring(select(2, d:incr("missing", 1))))
ngx.say("delete: ", tostring(d:delete("s")), " ", tostring(d:get("s")))
ngx.say("replace missing: ", tostring(select(2, d:replace("none", 1))))
ngx.say("add twice: ", tostring(d:add("k", 1)), " ", tostring(select(2, d:add("k", 1))))"#,
        )],
        path: "x",
        headers: &[],
        compare: &[],
    },
    Case {
        name: "set_header_empty_removes",
        scripts: &[(
            "access",
            r#"ngx.req.set_header("X-Probe", "")
ngx.req.set_header("X_Under", "1")"#,
        )],
        path: "headers",
        headers: &[("x-probe", "p1")],
        compare: &[],
    },
    Case {
        name: "args_and_escapes",
        scripts: &[(
            "content",
            r#"ngx.say("flag: ", tostring(ngx.var.arg_flag), " ", tostring(ngx.req.get_uri_args().flag))
ngx.say("escape: ", ngx.escape_uri("a b'!*()~-._/?&=é"))
ngx.say("unescape: ", ngx.unescape_uri("a%20b+c%zz"))
local args, err = ngx.req.get_uri_args(2)
ngx.say("max: ", tostring(err))
local h, herr = ngx.req.get_headers(1)
ngx.say("max headers: ", tostring(herr))
local raw = ngx.req.get_headers(100, true)
ngx.say("raw: ", tostring(raw["X-Probe"]), " ", tostring(raw["x-probe"]))"#,
        )],
        path: "x?flag&a=1&b=2&c=3",
        headers: &[("X-Probe", "p1")],
        compare: &[],
    },
    Case {
        name: "headers_sent_and_eof",
        scripts: &[(
            "content",
            r#"local before = ngx.headers_sent
ngx.say("one")
local after = ngx.headers_sent
ngx.header["X-Late"] = "late"
ngx.status = 500
ngx.eof()
local ok, err = ngx.say("two")
ngx.log(ngx.ERR, "after eof: ", tostring(ok), " ", tostring(err), " ", tostring(before), " ", tostring(after))"#,
        )],
        path: "x",
        headers: &[],
        compare: &["x-late"],
    },
    Case {
        name: "headers_sent_flag",
        scripts: &[(
            "content",
            r#"local before = ngx.headers_sent
ngx.print("")
ngx.say(tostring(before), " ", tostring(ngx.headers_sent))"#,
        )],
        path: "x",
        headers: &[],
        compare: &[],
    },
    Case {
        name: "cjson_as_lua_cjson",
        scripts: &[(
            "content",
            r#"local cjson = require "cjson"
local deep = string.rep("[", 200) .. string.rep("]", 200)
local ok, err = pcall(cjson.decode, deep)
ngx.say("depth 200: ", tostring(ok), " ", ok and "" or err)
ngx.say("new: ", type(cjson.new), " ", type(cjson.new and cjson.new().encode))
ngx.say("settings: ", tostring(cjson.encode_max_depth()), " ", tostring(cjson.decode_max_depth()), " ", tostring(select(1, cjson.encode_sparse_array())))
for _, bad in ipairs({ "{bad", "[1,", "\"\\u12\"", "nul", "[1 \"a\"]" }) do
    ngx.say(bad, " => ", select(2, pcall(cjson.decode, bad)))
end
ngx.say(select(2, pcall(cjson.encode, { [1] = 1, [100] = 2 })))
ngx.say(select(2, pcall(cjson.encode, function() end)))"#,
        )],
        path: "x",
        headers: &[],
        compare: &[],
    },
    Case {
        name: "functions_scripts_commonly_call",
        scripts: &[(
            "content",
            r#"ngx.say(ngx.quote_sql_str("it's \"x\"\n"))
ngx.say(ngx.crc32_short("hello"), " ", ngx.crc32_long("hello"))
ngx.say(type(ngx.req.raw_header), " ", type(ngx.resp.get_headers), " ", type(ngx.req.get_post_args))
local ngx_re = require "ngx.re"
local parts = ngx_re.split("a,b,,c", ",")
ngx.say(#parts, " ", table.concat(parts, "|"))
ngx.say(type(require "resty.core"))
ngx.say(type(os.getenv))"#,
        )],
        path: "x",
        headers: &[],
        compare: &[],
    },
];

/// NGINX's `location` for `case`, proxying to `origin` where it has no `content` script.
fn nginx_location(case: &Case, origin: SocketAddr) -> String {
    let mut out = format!("        location /{}/ {{\n", case.name);
    let mut content = false;
    for (phase, code) in case.scripts {
        content |= *phase == "content";
        out.push_str(&format!(
            "            {phase}_by_lua_block {{\n{code}\n            }}\n"
        ));
    }
    if !content {
        out.push_str(&format!("            proxy_pass http://{origin}/;\n"));
    }
    out.push_str("        }\n");
    out
}

/// Sluice's route for `case`: the location's prefix stripped before the origin, as NGINX's
/// `proxy_pass http://origin/` does.
fn sluice_route(case: &Case) -> String {
    let name = case.name;
    let mut out = format!(
        "[[route]]\nname = \"{name}\"\npath_prefix = \"/{name}/\"\nstrip_prefix = \"/{name}\"\nupstream = \"api\"\n[route.lua]\n"
    );
    for (phase, code) in case.scripts {
        out.push_str(&format!("{phase} = '''\n{code}\n'''\n"));
    }
    out
}

/// What is compared: status, the named headers, the body (the origin's `/headers` reduced
/// to the headers a script may have changed).
fn seen(got: &Got, compare: &[&str]) -> String {
    let mut out = format!("{}", got.status);
    for h in compare {
        let v = got
            .headers
            .get(*h)
            .map(|v| v.to_str().unwrap_or("?").to_owned());
        out.push_str(&format!(" {h}={v:?}"));
    }
    let body = match serde_json::from_str::<serde_json::Value>(&got.body) {
        Ok(v) if v.get("headers").is_some() => {
            let h = &v["headers"];
            format!("x-probe={} x_under={}", h["x-probe"], h["x_under"])
        }
        _ => got.body.clone(),
    };
    out.push_str(&format!(" body={body:?}"));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openresty_behaviour_families_answer_as_in_nginx_with_lua() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let origin = Origin::start("api").await;
    let port = free_port();
    let mut servers = format!(
        "    lua_shared_dict d 1m;\n    default_type text/plain;\n    server {{\n        listen 127.0.0.1:{port};\n"
    );
    let mut config = format!(
        "[[listener]]\nname = \"web\"\naddress = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"api\"\nservers = [{{ address = \"{}\" }}]\n\
         [lua]\nshared_dicts = {{ d = \"1m\" }}\n",
        origin.addr
    );
    for case in CASES {
        servers.push_str(&nginx_location(case, origin.addr));
        config.push_str(&sluice_route(case));
    }
    servers.push_str("    }\n");
    let _nginx = nginx_with(&d, &servers, true, "error");
    let nginx: SocketAddr = ([127, 0, 0, 1], port).into();
    let gw = TestGateway::start(&config, dir).await;
    wait_listening(nginx).await;
    let web = gw.addr("web");
    let mut table = String::new();
    let mut differ = Vec::new();
    for case in CASES {
        let path = format!("/{}/{}", case.name, case.path);
        let a = crate::auth::get(nginx, &path, case.headers).await;
        let b = crate::auth::get(web, &path, case.headers).await;
        let (sa, sb) = (seen(&a, case.compare), seen(&b, case.compare));
        let mark = if sa == sb { "  " } else { "!!" };
        table.push_str(&format!(
            "{mark} {}\n     nginx:  {sa}\n     sluice: {sb}\n",
            case.name
        ));
        if sa != sb {
            differ.push(case.name);
        }
    }
    eprintln!("{table}");
    assert!(
        differ.is_empty(),
        "differ from NGINX + lua: {differ:?}\n{table}"
    );
}
