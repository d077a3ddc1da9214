#!/usr/bin/env python3
"""lua-nginx-module's own test suite (its Test::Nginx `t/*.t` files, tag v0.10.23, the
version Debian's libnginx-mod-http-lua is) ported to Sluice's `[route.lua]`, and each ported
case run on both Debian's NGINX 1.22 + lua-nginx-module 0.10.23 and Sluice.

Two steps:

- `bench/luat --convert` reads the test files from a git mirror of
  openresty/lua-nginx-module (`--repo`, default /work/.mirror/openresty+lua-nginx-module/repo),
  parses their blocks as Test::Base does (the block syntax, the `norm trim` default filters,
  `chomp`, `chop` and `eval`; Perl evaluates the `eval` sections and the file's preamble, with
  Test::Nginx's functions stubbed, so `"...\\n" x 3`, `qr/.../` and `[...]` mean what they mean
  there), keeps the cases whose `--- config` is `location` blocks of `*_by_lua` phases and
  harmless directives, and writes them to bench/luat-cases.json (committed; deterministic).
  Every other case is kept as skipped, with a short reason.
- `bench/luat` (the run) reads bench/luat-cases.json and runs every ported case against
  both gateways, each case on its own port on each (so a request is the test's own, `Host:
  localhost` included): many cases share one NGINX and one Sluice process (a batch); cases
  with a different `init_by_lua`, and cases that use the same shared dictionary (NGINX starts
  afresh for every test block, so a dictionary is empty at a case's start), go to different
  batches. A case passes on a gateway when every response of every repetition (`repeat_each`)
  has the status, body and headers the test expects (`--- error_code`, `--- response_body`,
  `--- response_body_like` as Test::Nginx's `like($body, qr/$pattern/s)`, `---
  response_headers`, `!Name` for absent, ...). `error_log`, `no_error_log`, `grep_error_log`
  and `stap` sections are not compared (the gateways' logs differ by design).

The mapping to Sluice: each `location` is a `[[route]]` on the case's listener (`=` is
`path_exact`, a prefix `path_prefix`, `~` and `~*` `path_regex`), each `X_by_lua[_block]` the
`[route.lua]` key `X` (`content` for content_by_lua where `sluice check` accepts that key;
otherwise the content script runs as `access`, which answers when it writes or exits, and a
script that does neither goes on to the run's origin: 200, empty body). `lua_shared_dict` is
`[lua] shared_dicts`, `init_by_lua` `[lua] init`; `lua_need_request_body on`, or a script that
calls `ngx.req.read_body`, is `request_buffering = true` (docs/lua.md).

What a run asserts (as bench/crs does): every case NGINX passes, Sluice passes, except those
listed in bench/luat-known.toml with a reason; and every listed case still fails in Sluice (a
fixed one leaves the list). The report is bench/results/luat.md (luat-smoke.md for --smoke)
and a JSON file beside it.

lua-nginx-module's tests are licensed under the BSD license (see LICENSE_TEXT below and the
`license` field of bench/luat-cases.json).
"""

import argparse
import concurrent.futures
import datetime
import http.server
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "bench" / "luat-cases.json"
KNOWN = ROOT / "bench" / "luat-known.toml"
MIRROR = Path("/work/.mirror/openresty+lua-nginx-module/repo")
TAG = "v0.10.23"
MODULES = Path("/usr/lib/nginx/modules")
# CI's subset: a few small files that cover the phases, the regex API, the shared dictionary
# and response headers.
SMOKE = ["005-exit.t", "007-md5.t", "013-base64.t", "016-resp-header.t", "034-match.t", "043-shdict.t",
         "023-rewrite/exit.t", "024-access/exit.t"]
BATCH_MAX = 200           # cases per NGINX + Sluice pair
PARALLEL = 4              # cases in flight at once within a batch
BATCHES_AT_ONCE = 3       # NGINX + Sluice pairs running at once
DEFAULT_TIMEOUT = 3.0     # Test::Nginx's default per request
MAX_TIMEOUT = 10.0

LICENSE_TEXT = """The test cases below are converted from lua-nginx-module's test suite (t/*.t), which is
licensed under the BSD license:

Copyright (C) 2009-2017, by Xiaozhe Wang (chaoslawful) <chaoslawful@gmail.com>.
Copyright (C) 2009-2019, by Yichun "agentzh" Zhang (章亦春) <agentzh@gmail.com>, OpenResty Inc.
All rights reserved.

Redistribution and use in source and binary forms, with or without modification, are permitted
provided that the following conditions are met:

* Redistributions of source code must retain the above copyright notice, this list of conditions
  and the following disclaimer.
* Redistributions in binary form must reproduce the above copyright notice, this list of
  conditions and the following disclaimer in the documentation and/or other materials provided
  with the distribution.

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR
IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND
FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR
CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE,
DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER
IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT
OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE."""


def log(msg):
    print(f"[luat {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Step 1: Test::Base blocks, read by Perl.

# Test::Base's block syntax (as Test::Nginx uses it) and the file's preamble with Test::Nginx's
# functions stubbed: one .t file on stdin, its blocks as JSON on stdout. Strings are bytes
# (JSON \u00XX); a qr// is {qr, flags}; an array a list.
TEST_BASE_PL = r"""
use strict;
use warnings;
no warnings qw(once redefine);
use JSON::PP;

our %FLAGS = (repeat_each => 1, no_shuffle => 0, no_root_location => 0, workers => 1,
              master_on => 0, block_preprocessor => 0, preamble_error => undef);
package main;
no strict 'vars';
our ($ServerPort, $ServerPortForClient, $ServerName) = ('@@SERVER_PORT@@', '@@SERVER_PORT@@', 'localhost');
our $ServRoot = '@@SERVER_ROOT@@';
our $HtmlDir = '@@HTML_DIR@@';
sub repeat_each { $FLAGS{repeat_each} = $_[0] if @_; $FLAGS{repeat_each} }
sub no_shuffle { $FLAGS{no_shuffle} = 1 }
sub no_root_location { $FLAGS{no_root_location} = 1 }
sub workers { $FLAGS{workers} = $_[0] if @_; $FLAGS{workers} }
sub master_on { $FLAGS{master_on} = 1 }
sub master_process_enabled { $FLAGS{master_on} = $_[0] if @_; $FLAGS{master_on} }
sub add_block_preprocessor { $FLAGS{block_preprocessor} = 1 }
sub use_hup { $FLAGS{use_hup} = 1 }
sub html_dir { '@@HTML_DIR@@' }
sub server_root { '@@SERVER_ROOT@@' }
sub server_port { '@@SERVER_PORT@@' }
sub server_name { 'localhost' }
sub blocks { 1 }
sub plan { 1 }
sub run_tests { 1 }
sub log_level { 1 }
sub no_long_string { 1 }
sub no_diff { 1 }
sub worker_connections { 1 }
sub env_to_nginx { 1 }
sub check_accum_error_log { 1 }
sub AUTOLOAD { return 1 }
sub DESTROY {}

my $src = do { local $/; <STDIN> };
my ($pre, $data) = split /^__DATA__\r?\n/m, $src, 2;
$data = '' unless defined $data;
%ENV = (%ENV, map { ("TEST_NGINX_$_" => "\@\@$_\@\@") } qw(SERVER_PORT HTML_DIR SERVER_ROOT MEMCACHED_PORT
        REDIS_PORT MYSQL_PORT RESOLVER CERT_DIR PWD SERVER_SSL_PORT SERVER_IP));
(my $code = $pre) =~ s/^\s*(use|no)\s+[^;]*;//mg;
{
    local $SIG{__WARN__} = sub {};
    eval "package main; no strict; $code; 1" or $FLAGS{preamble_error} = "$@";
}

sub bytes_of {
    my $s = shift;
    utf8::encode($s) if utf8::is_utf8($s);
    return "$s";
}

sub enc {
    my $v = shift;
    return undef unless defined $v;
    if (ref $v eq 'Regexp') {
        my ($p, $m) = re::regexp_pattern($v);
        return { qr => bytes_of($p), flags => $m };
    }
    return [ map { enc($_) } @$v ] if ref $v eq 'ARRAY';
    if (ref $v eq 'HASH') {
        return { hash => { map { ($_ => enc($v->{$_})) } keys %$v } };
    }
    return { unsupported => ref $v } if ref $v;
    return bytes_of($v);
}

my %filter = (
    norm => sub { my $t = shift; $t = '' unless defined $t; $t =~ s/\015\012/\n/g; $t =~ s/\r/\n/g; ($t) },
    trim => sub { map { my $x = $_; if (defined $x && !ref $x) { $x =~ s/\A([ \t]*\n)+//; $x =~ s/(?<=\n)\s*\z//g; } $x } @_ },
    chomp => sub { map { my $x = $_; chomp $x if defined $x && !ref $x; $x } @_ },
    chop => sub { map { my $x = $_; chop $x if defined $x && !ref $x; $x } @_ },
    unchomp => sub { map { $_ . "\n" } @_ },
    eval => sub {
        my $c = shift;
        my @r;
        {
            local $SIG{__WARN__} = sub {};
            @r = eval "package main; no strict; $c";
        }
        die "eval: $@" if $@;
        @r;
    },
);

my @blocks;
my @hunks = ($data =~ /^(===.*?(?=^===|\z))/msg);
for my $hunk (@hunks) {
    $hunk =~ s/\A===[ \t]*(.*)\s+// or next;
    my $name = $1;
    my @parts = split /^--- +\(?(\w+)\)? *(.*)?\n/m, $hunk;
    shift @parts;
    my (%sections, @order, @errors);
    while (@parts) {
        my ($type, $filters, $value) = splice(@parts, 0, 3);
        $value = '' unless defined $value;
        $filters = '' unless defined $filters;
        if ($filters =~ /:(\s|\z)/) {
            ($filters, $value) = split /\s*:(?:\s+|\z)/, $filters, 2;
            $value = '' unless defined $value;
            $value =~ s/^\s*(.*?)\s*$/$1/;
        }
        my @f = ('norm', 'trim');
        my @append;
        for my $f (split /\s+/, $filters) {
            next unless length $f;
            if ($f =~ s/^-//) { @f = grep { $_ ne $f } @f }
            elsif ($f =~ s/^\+//) { push @append, $f }
            else { push @f, $f }
        }
        my @v = ($value);
        for my $f (@f, @append) {
            if (!$filter{$f}) { push @errors, "$type: filter '$f'"; last }
            my @r = eval { $filter{$f}->(@v) };
            if ($@) { (my $e = $@) =~ s/\s+at \(eval.*//s; push @errors, "$type: $e"; last }
            @v = @r;
        }
        $sections{$type} = { filters => $filters, value => enc($v[0]) };
        push @order, $type;
    }
    push @blocks, { name => bytes_of($name), sections => \%sections, order => \@order, errors => \@errors };
}
my %env = map { ($_ => bytes_of($ENV{$_})) } grep { /^TEST_NGINX_/ } keys %ENV;
print JSON::PP->new->ascii->canonical->encode({ flags => \%FLAGS, env => \%env, blocks => \@blocks });
"""


def text_of(v):
    """A Perl byte string (decoded from JSON as code points 0-255) as the str we keep: its
    bytes decoded as UTF-8, undecodable bytes as surrogates (so they round-trip)."""
    if isinstance(v, str):
        return v.encode("latin-1").decode("utf-8", "surrogateescape")
    if isinstance(v, list):
        return [text_of(x) for x in v]
    if isinstance(v, dict):
        if "qr" in v:
            return {"qr": text_of(v["qr"]), "flags": v["flags"]}
        if "hash" in v:
            return {"hash": {k: text_of(x) for k, x in v["hash"].items()}}
        return v
    return v


def b(s):
    """Our str back to its bytes."""
    return s.encode("utf-8", "surrogateescape")


def read_blocks(text):
    out = subprocess.run(["perl", "-e", TEST_BASE_PL], input=text, capture_output=True, check=True)
    d = json.loads(out.stdout)
    for blk in d["blocks"]:
        blk["name"] = text_of(blk["name"])
        for sec in blk["sections"].values():
            sec["value"] = text_of(sec["value"])
    d["env"] = {k: text_of(v) for k, v in d["env"].items()}
    return d


# --------------------------------------------------------------------------------------------
# NGINX's configuration syntax.

class Skip(Exception):
    pass


def nginx_unescape(s):
    """ngx_conf_read_token's copy of a token: \\" \\' \\\\ lose the backslash, \\t \\r \\n are
    the control characters, any other backslash stays."""
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n in "\"'\\":
                out.append(n)
                i += 2
                continue
            if n in "trn":
                out.append({"t": "\t", "r": "\r", "n": "\n"}[n])
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


def lua_block_end(s, i):
    """The index of the `}` that closes a `*_by_lua_block {` whose body starts at s[i], as
    lua-nginx-module's block lexer finds it: braces in Lua strings, long brackets and
    comments do not count."""
    depth = 1
    n = len(s)
    while i < n:
        c = s[i]
        if c == "-" and s.startswith("--", i):
            m = re.match(r"--\[(=*)\[", s[i:i + 64])
            if m:
                close = "]" + m.group(1) + "]"
                j = s.find(close, i + len(m.group(0)))
                if j < 0:
                    raise Skip("config: unterminated Lua comment")
                i = j + len(close)
                continue
            j = s.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if c == "[":
            m = re.match(r"\[(=*)\[", s[i:i + 64])
            if m:
                close = "]" + m.group(1) + "]"
                j = s.find(close, i + len(m.group(0)))
                if j < 0:
                    raise Skip("config: unterminated Lua long string")
                i = j + len(close)
                continue
        if c in "\"'":
            j = i + 1
            while j < n and s[j] != c:
                if s[j] == "\\":
                    j += 1
                elif s[j] == "\n":
                    raise Skip("config: unterminated Lua string")
                j += 1
            i = j + 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise Skip("config: unterminated *_by_lua_block")


def parse_conf(s):
    """A list of directives: {name, args, block (a list) or None, start, end}."""
    pos = 0
    n = len(s)

    def parse_list(top):
        nonlocal pos
        items = []
        cur = None
        while True:
            while pos < n and s[pos] in " \t\r\n":
                pos += 1
            if pos >= n:
                if cur is not None or not top:
                    raise Skip("config: unexpected end")
                return items
            c = s[pos]
            if c == "#":
                j = s.find("\n", pos)
                pos = n if j < 0 else j + 1
                continue
            if c == "}":
                if top or cur is not None:
                    raise Skip("config: unexpected }")
                pos += 1
                return items
            if c == ";":
                if cur is None:
                    raise Skip("config: unexpected ;")
                cur["end"] = pos + 1
                pos += 1
                items.append(cur)
                cur = None
                continue
            if c == "{":
                if cur is None:
                    raise Skip("config: unexpected {")
                pos += 1
                if cur["name"].endswith("_by_lua_block"):
                    e = lua_block_end(s, pos)
                    cur["args"].append(s[pos:e])
                    cur["lua_block"] = True
                    pos = e + 1
                else:
                    cur["block"] = parse_list(False)
                cur["end"] = pos
                items.append(cur)
                cur = None
                continue
            # a word, quoted or not
            if c in "\"'":
                j = pos + 1
                while j < n and s[j] != c:
                    if s[j] == "\\":
                        j += 1
                    j += 1
                if j >= n:
                    raise Skip("config: unterminated string")
                word = nginx_unescape(s[pos + 1:j])
                start = pos
                pos = j + 1
            else:
                j = pos
                while j < n and s[j] not in " \t\r\n;{}" and not (s[j] == "#" and j == pos):
                    if s[j] == "\\":
                        j += 1
                    j += 1
                word = nginx_unescape(s[pos:j])
                start = pos
                pos = j
            if cur is None:
                cur = {"name": word, "args": [], "block": None, "start": start, "end": None}
            else:
                cur["args"].append(word)

    return parse_list(True)


# --------------------------------------------------------------------------------------------
# What a case may use.

PHASES = {"rewrite": "rewrite", "access": "access", "content": "content",
          "header_filter": "header_filter", "body_filter": "body_filter", "log": "log"}
# Location directives that change nothing either gateway is asked to compare.
HARMLESS = {"default_type", "charset", "lua_need_request_body", "client_max_body_size",
            "client_body_buffer_size", "lua_code_cache", "lua_socket_log_errors",
            "lua_socket_connect_timeout", "lua_socket_send_timeout", "lua_socket_read_timeout",
            "lua_socket_buffer_size", "lua_socket_pool_size", "lua_socket_keepalive_timeout",
            "keepalive_timeout", "error_log", "access_log", "postpone_output",
            "lua_http10_buffering", "send_timeout", "client_body_timeout", "log_not_found",
            "server_tokens", "client_header_buffer_size",
            "large_client_header_buffers", "gzip_min_length", "tcp_nodelay", "lua_need_request_body"}
# http_config directives that change nothing compared (lua_need_request_body: as in a location).
HTTP_HARMLESS = {"lua_need_request_body", "lua_code_cache", "server_tokens",
                 "lua_socket_log_errors", "client_header_buffer_size", "large_client_header_buffers"}
DIRECTIVE_REASONS = [
    (r"^echo", "echo module content"),
    (r"^(proxy_|fastcgi_|uwsgi_|scgi_|memcached_)", "proxy_pass"),
    (r"^(set|set_by_lua.*|set_\w+)$", "set $var"),
    (r"^(error_page|internal|recursive_error_pages)$", "error_page/internal"),
    (r"^(root|alias|index|autoindex|try_files)$", "static files"),
    (r"^(rewrite|return|if)$", "rewrite module (rewrite/return/if)"),
    (r"^(more_\w+|add_header|expires)$", "header module directive"),
    (r"^(allow|deny|satisfy|auth_\w+)$", "access module directive"),
    (r"^ssl", "SSL"),
    (r"^\w+_by_lua_file$", "*_by_lua_file"),
    (r"^\w+_by_lua_no_postpone$", "*_by_lua_no_postpone"),
    (r"^(lua_check_client_abort)$", "lua_check_client_abort"),
    (r"^(lua_use_default_type|lua_transform_underscores_in_response_headers)$", "lua_* behaviour directive"),
    (r"^(chunked_transfer_encoding|lua_malloc_trim|limit_rate\w*|sendfile|output_buffers)$", "output directive"),
    (r"^(resolver|resolver_timeout)$", "resolver"),
    (r"^(balancer_by_lua\w*|ssl_\w+_by_lua\w*|server_rewrite_by_lua\w*)$", "balancer/ssl/server_rewrite"),
]
LUA_REASONS = [
    (r"ngx\.location\.capture", "subrequest (ngx.location.capture)"),
    (r"ngx\.exec\b", "ngx.exec"),
    (r"ngx\.req\.socket|ngx\.socket\.|ngx_socket|\bngx\.socket\b", "cosocket"),
    (r"ngx\.thread\.", "ngx.thread"),
    (r"ngx\.semaphore|resty\.core\.semaphore|ngx\.sema", "ngx.semaphore"),
    (r"ngx\.timer\.every", "ngx.timer.every"),
    (r"require\s*\(?\s*['\"]ffi['\"]|\bffi\.", "ffi"),
    (r"resty\.(mysql|redis|memcached|upstream)|ngx\.balancer|ngx\.ssl|ngx\.ocsp|ngx\.upstream", "mysql/redis/memcached/balancer/ssl library"),
    (r"ngx\.on_abort", "ngx.on_abort"),
    (r"\bndk\b", "ndk.set_var (set-misc directives)"),
    (r"ngx\.delayed_load", "lua-nginx-module's test-only C modules"),
    (r"ngx\.(pipe|process)\b|ngx\.run_worker_thread|ngx\.worker\.exiting", "ngx.pipe/process/worker thread"),
    (r"\b(io|debug)\.\w+|os\.(execute|exit|remove|rename|getenv|tmpname)", "io/os/debug library"),
    (r":(lpush|rpush|lpop|rpop|llen|lrange)\s*\(", "shared dict lists"),
    (r"ngx\.req\.(set_body_file|get_body_file|init_body|append_body|finish_body)", "request body files/streaming"),
    (r"ngx\.req\.set_uri\s*\([^)]*,\s*true", "ngx.req.set_uri jump"),
    (r"package\.(loaded|path|cpath)\s*=|package\.preload|require\s*\(?\s*['\"](resty\.core|ngx\.re|ngx\.resp|ngx\.errlog|ngx\.req|ngx\.base64|ngx\.process)['\"]", "resty.core/ngx.* module internals"),
    (r"collectgarbage\s*\(\s*['\"]count", "collectgarbage count"),
]
VAR_ASSIGN = re.compile(r"ngx\.var(?:\.(\w+)|\[\s*['\"](\w+)['\"]\s*\])\s*=(?!=)")
SECTION_REASONS = {
    "tcp_listen": "mock TCP server", "tcp_reply": "mock TCP server", "tcp_query": "mock TCP server",
    "udp_listen": "mock UDP server", "udp_reply": "mock UDP server", "udp_query": "mock UDP server",
    "user_files": "user_files", "abort": "client abort", "ignore_response": "ignore_response (log checks only)",
    "must_die": "must_die", "reload_fails": "reload", "http2": "HTTP/2", "http3": "HTTP/3",
    "post_main_config": "post_main_config", "server_name": "server_name", "error_log_file": "error_log_file",
    "response_body_json_sort": "response body filters", "response_body_filters": "response body filters",
    "skip_eval": "skip_eval", "skip_openssl": "SSL", "http_server": "http_server", "curl": "curl",
    "stream_server_config": "stream", "shutdown": "shutdown", "init": "Perl init", "response": "response section",
    "request_body_unlike": "request_body_unlike", "response_header": "response_header",
    "tcp_no_close": "mock TCP server", "tcp_shutdown": "mock TCP server", "tcp_query_len": "mock TCP server",
    "udp_reply_delay": "mock UDP server", "http_config_eval": "http_config_eval", "http09": "HTTP/0.9 request",
}
PLACEHOLDER_REASONS = {"MEMCACHED_PORT": "memcached", "REDIS_PORT": "redis", "MYSQL_PORT": "mysql",
                       "RESOLVER": "resolver", "CERT_DIR": "SSL", "SERVER_SSL_PORT": "SSL", "PWD": "TEST_NGINX_PWD",
                       "SERVER_IP": "TEST_NGINX_SERVER_IP"}
NGINX_VERSION = (1, 22, 1)


def version_tuple(s):
    return tuple(int(x) for x in re.findall(r"\d+", s)[:3])


def skip_nginx(spec):
    """`--- skip_nginx: 2: < 1.5.12`: does it skip on NGINX 1.22.1?"""
    m = re.match(r"\s*\d+\s*:\s*(<=|>=|<|>|==|!=)?\s*([\d.]+)", spec)
    if not m:
        return True
    op, v = m.group(1) or "==", version_tuple(m.group(2))
    have = NGINX_VERSION[:len(v)]
    return {"<": have < v, ">": have > v, "<=": have <= v, ">=": have >= v, "==": have == v, "!=": have != v}[op]


def perl_re(v, default_flags):
    """A Perl pattern (a qr or a string) as {re, flags} for Python's re (bytes)."""
    if isinstance(v, dict) and "qr" in v:
        pat, flags = v["qr"], v["flags"]
    elif isinstance(v, str):
        pat, flags = v, default_flags
    else:
        raise Skip("pattern: unsupported value")
    py = translate_re(pat)
    try:
        re.compile(b(py.replace("@@SERVER_PORT@@", "1984")), re_flags(flags))
    except re.error as e:
        raise Skip(f"pattern: Perl regex not translated ({e})")
    return {"re": py, "flags": flags}


def translate_re(p):
    p = re.sub(r"\(\?<([A-Za-z_]\w*)>", r"(?P<\1>", p)
    p = p.replace(r"\z", r"\Z").replace(r"\h", r"[ \t]")
    p = re.sub(r"\$ServerPort(ForClient)?\b", "@@SERVER_PORT@@", p)
    return p


def re_flags(flags):
    f = 0
    for c in flags:
        f |= {"s": re.S, "i": re.I, "m": re.M, "x": re.X}.get(c, 0)
    return f


def build_request(req, more_headers):
    """Test::Nginx's build_request_from_packets for one request string."""
    hdr, chunked = parse_more_headers(more_headers)
    first, _, content = req.partition("\n")
    m = re.match(r"^(\s*)(\S+)( *)((\S+)( *))?((\S+)( *))?(\s*)$", first + ("\n" if _ else ""))
    if not m:
        raise Skip("request: bad request line")
    if m.group(8) == "HTTP/0.9" or (m.group(8) or "").startswith("HTTP/0"):
        raise Skip("HTTP/0.9 request")
    meth, url, ver = m.group(2), m.group(5) or "/", m.group(8) or "HTTP/1.1"
    len_header = ""
    if not chunked and content != "" and not re.search(r"(?:^|\n)Content-Length:", hdr):
        content = re.sub(r"^\s+|\s+$", "", content)
        len_header = f"Content-Length: {len(b(content))}\r\n"
    headers = ""
    if not re.search(r"(?:^|\n)Host:", hdr, re.I | re.M):
        headers += "Host: localhost\r\n"
    if not re.search(r"(?:^|\n)Connection", hdr, re.I | re.M):
        headers += "Connection: @@CONN@@\r\n"
    headers += hdr + len_header + "\r\n"
    return f"{meth} {url} {ver}\r\n{headers}{content}", meth


def parse_more_headers(s):
    out = ""
    chunked = False
    for line in re.split(r"\n+", s or ""):
        if re.match(r"^\s*#", line) or line == "":
            continue
        kv = re.split(r":\s*", line, maxsplit=1)
        key, val = kv[0], kv[1] if len(kv) > 1 else ""
        if key.lower() == "transfer-encoding" and val == "chunked":
            chunked = True
        out += f"{key}: {val}\r\n"
    return out, chunked


def parse_headers_spec(s):
    """Test::Nginx's parse_headers: `Name: value` lines, `!Name` for absent."""
    out = []
    for line in (s or "").split("\n"):
        line = line.strip()
        if not line:
            continue
        if line.startswith("!"):
            out.append([line[1:].strip(), None])
        else:
            kv = re.split(r"\s*:\s*", line, maxsplit=1)
            out.append([kv[0], kv[1] if len(kv) > 1 else ""])
    return out


def indexed(value, i, need_array, what):
    if need_array:
        if isinstance(value, list):
            if i >= len(value):
                raise Skip(f"{what}: fewer expected values than requests")
            return value[i]
        raise Skip(f"{what}: not an array for many requests")
    if isinstance(value, list):
        return value[0] if value else None
    return value


def convert_case(file, flags, env, blk):
    """One block: the ported case, or raises Skip(reason)."""
    sec = {k: v["value"] for k, v in blk["sections"].items()}
    if "SKIP" in sec:
        raise Skip("--- SKIP")
    if flags.get("preamble_error"):
        raise Skip("Perl preamble (certificates, helpers)")
    if flags.get("block_preprocessor"):
        raise Skip("add_block_preprocessor")
    if flags.get("use_hup") or "hup" in file:
        raise Skip("HUP reload")
    if flags.get("master_on") or int(flags.get("workers") or 1) > 1:
        raise Skip("master_on/workers(N)")
    needed = {"config", "http_config", "main_config", "request", "more_headers", "response_body",
              "response_body_like", "response_body_unlike", "error_code", "error_code_like",
              "response_headers", "response_headers_like", "raw_request", "pipelined_requests",
              "raw_response_headers_like", "raw_response_headers_unlike", "timeout"}
    for e in blk["errors"]:
        if e.split(":")[0] in needed:
            raise Skip("Perl eval of a section")
    for s in blk["order"]:
        if s in SECTION_REASONS:
            raise Skip(SECTION_REASONS[s])
        if s in ("skip_nginx", "skip_nginx2") and skip_nginx(sec[s] if isinstance(sec[s], str) else ""):
            raise Skip("skip_nginx")
        if s == "request_eval" or s == "response_body_eval":
            raise Skip("deprecated *_eval section")
    if "config" not in sec or not isinstance(sec["config"], str):
        raise Skip("no --- config")

    def expand(t):
        """Test::Nginx's expand_env_in_text, onto our placeholders."""
        if not isinstance(t, str):
            return t

        def env_var(m):
            name = m.group(1)
            if name in env:
                return env[name]
            return m.group(0)
        return re.sub(r"\$(TEST_NGINX_[_A-Z0-9]+)", env_var, t)

    def scan(t):
        for m in re.finditer(r"@@([A-Z_]+)@@", t):
            if m.group(1) in PLACEHOLDER_REASONS:
                raise Skip(PLACEHOLDER_REASONS[m.group(1)])
        m = re.search(r"\$TEST_NGINX_(\w+)", t)
        if m:
            raise Skip("extra listeners (TEST_NGINX_RAND_PORT)" if "RAND_PORT" in m.group(1) else "env " + m.group(0)[1:])

    def all_strings(v):
        if isinstance(v, str):
            yield v
        elif isinstance(v, list):
            for x in v:
                yield from all_strings(x)
        elif isinstance(v, dict):
            if "qr" in v:
                yield v["qr"]
            elif "hash" in v:
                yield from all_strings(list(v["hash"].values()))

    for k in list(sec):
        if k in needed:
            sec[k] = expand(sec[k]) if isinstance(sec[k], str) else [expand(x) if isinstance(x, str) else x for x in sec[k]] if isinstance(sec[k], list) else sec[k]
            for t in all_strings(sec[k]):
                scan(t)

    # main_config: env lines only.
    main = sec.get("main_config") or ""
    if not isinstance(main, str):
        raise Skip("main_config: not a string")
    env_lines = []
    for d in parse_conf(main):
        if d["name"] == "env" and d["block"] is None:
            env_lines.append(main[d["start"]:d["end"]])
        else:
            raise Skip("main_config: " + d["name"])

    # http_config: lua_shared_dict, init_by_lua.
    httpc = sec.get("http_config") or ""
    if not isinstance(httpc, str):
        raise Skip("http_config: not a string")
    dicts, init, init_raw = {}, None, None
    server_level_http = []
    for d in parse_conf(httpc):
        name = d["name"]
        if name == "lua_shared_dict" and len(d["args"]) == 2 and d["block"] is None:
            if not re.fullmatch(r"\d+[kKmM]?", d["args"][1]):
                raise Skip("http_config: lua_shared_dict size")
            dicts[d["args"][0]] = d["args"][1].lower()
        elif name in ("init_by_lua_block", "init_by_lua") and len(d["args"]) == 1:
            if init is not None:
                raise Skip("http_config: two init_by_lua")
            init, init_raw = d["args"][0], httpc[d["start"]:d["end"]]
        elif name in HTTP_HARMLESS and d["block"] is None:
            server_level_http.append(d)
        elif name == "lua_package_path" or name == "lua_package_cpath":
            raise Skip("lua_package_path")
        elif name.startswith("init_worker_by_lua"):
            raise Skip("init_worker_by_lua")
        elif name == "init_by_lua_file":
            raise Skip("*_by_lua_file")
        elif name in ("resolver", "upstream", "server", "lua_ssl_trusted_certificate", "proxy_pass"):
            raise Skip({"resolver": "resolver", "upstream": "upstream/extra server", "server": "upstream/extra server"}.get(name, "SSL"))
        else:
            raise Skip("http_config: " + name)

    # config: location blocks.
    conf = sec["config"]
    routes = []
    server_level = []
    lua_all = [init] if init else []
    for d in parse_conf(conf):
        if d["name"] != "location":
            if d["name"] in HARMLESS and d["block"] is None:
                server_level.append(d)
                continue
            raise Skip(directive_reason(d["name"], "server-level "))
        args = d["args"]
        if d["block"] is None or not args:
            raise Skip("config: location")
        if len(args) == 1:
            mod, path = "", args[0]
        elif len(args) == 2:
            mod, path = args
        else:
            raise Skip("config: location arguments")
        if path.startswith("@"):
            raise Skip("named location")
        match = {"=": "exact", "": "prefix", "^~": "prefix", "~": "regex", "~*": "regex_i"}.get(mod)
        if match is None:
            raise Skip("config: location modifier")
        route = {"match": match, "path": path, "lua": {}, "request_buffering": False, "default_type": None}
        for x in server_level_http + server_level + d["block"]:
            name = x["name"]
            m = re.fullmatch(r"(rewrite|access|content|header_filter|body_filter|log)_by_lua(_block)?", name)
            if m:
                if len(x["args"]) != 1:
                    raise Skip("config: " + name + " arguments")
                if m.group(1) in route["lua"]:
                    raise Skip("config: two " + m.group(1) + " scripts")
                route["lua"][m.group(1)] = x["args"][0]
                lua_all.append(x["args"][0])
                continue
            if name == "echo" and x["block"] is None:
                # ngx_echo's `echo` as content: NGINX runs the module; Sluice a content script
                # that writes the same bytes.
                if "content" in route["lua"] and not route.get("echo"):
                    raise Skip("echo module content")
                route["lua"]["content"] = route["lua"].get("content", "") + echo_lua(x["args"])
                route["echo"] = True
                continue
            if x["block"] is not None:
                raise Skip("nested location" if name == "location" else directive_reason(name, ""))
            if name in HARMLESS:
                if name == "lua_need_request_body" and x["args"][:1] == ["on"]:
                    route["request_buffering"] = True
                if name == "default_type" and x["args"]:
                    route["default_type"] = x["args"][0]
                continue
            raise Skip(directive_reason(name, ""))
        routes.append(route)
    if not routes:
        raise Skip("config: no location")
    for code in lua_all:
        for pat, reason in LUA_REASONS:
            if reason and re.search(pat, code, re.M):
                raise Skip(reason)
        for m in VAR_ASSIGN.finditer(code):
            var = m.group(1) or m.group(2)
            if var != "args":
                raise Skip("ngx.var.X = (nginx variables)")
        if re.search(r"ngx\.var\.\w+", code) and re.search(r"\$\w+", conf) and re.search(r"\bset\s+\$", conf):
            raise Skip("set $var")
    for r in routes:
        if any("ngx.req.read_body" in c for c in r["lua"].values()):
            r["request_buffering"] = True

    # requests
    more = sec.get("more_headers")
    requests = []     # one per connection: {data, methods}
    need_array = False
    if "raw_request" in sec:
        rr = sec["raw_request"]
        if isinstance(rr, list):
            rr = "".join(x for x in rr if isinstance(x, str))
        if not isinstance(rr, str):
            raise Skip("raw_request: not a string")
        m = re.match(r"\s*(\S+)", rr)
        requests.append({"data": rr, "methods": [m.group(1) if m else "GET"], "raw": True})
    elif "pipelined_requests" in sec:
        reqs = sec["pipelined_requests"]
        if not isinstance(reqs, list) or not all(isinstance(x, str) for x in reqs):
            raise Skip("pipelined_requests: not a list of strings")
        data, methods = "", []
        for i, r in enumerate(reqs):
            h = more[i] if isinstance(more, list) else more
            one, meth = build_request(r, h)
            data += one.replace("@@CONN@@", "close" if i == len(reqs) - 1 else "keep-alive")
            methods.append(meth)
        requests.append({"data": data, "methods": methods})
        need_array = True
    elif "request" in sec:
        req = sec["request"]
        if isinstance(req, str):
            req = [re.sub(r"^(\s*#[^\n]+\s+|\s+)+", "", req)]
            plain = True
        elif isinstance(req, list):
            plain = False
        else:
            raise Skip("request: unsupported value")
        for i, r in enumerate(req):
            if isinstance(r, list):
                r = "".join(x if isinstance(x, str) else (x.get("hash", {}).get("value") or "") for x in r)
                if not isinstance(r, str):
                    raise Skip("request: packets")
            if not isinstance(r, str):
                raise Skip("request: unsupported value")
            h = more[i] if isinstance(more, list) else more
            if isinstance(h, list):
                raise Skip("more_headers: nested")
            one, meth = build_request(r, h)
            requests.append({"data": one.replace("@@CONN@@", "close"), "methods": [meth]})
        need_array = not plain and len(req) > 1
    else:
        raise Skip("no request")

    # expectations, one per response
    n = sum(len(r["methods"]) for r in requests)
    expect = []
    for i in range(n):
        e = {}
        if "error_code_like" in sec:
            e["status_like"] = perl_re(indexed(sec["error_code_like"], i, need_array, "error_code_like"), "sm")
        elif "error_code" in sec:
            v = indexed(sec["error_code"], i, need_array, "error_code")
            if v is not None and not isinstance(v, str):
                raise Skip("error_code: unsupported value")
            e["status"] = v.strip() if v is not None else ""
        else:
            e["status"] = "200"
        if "ignore_response_body" in sec:
            pass
        elif "response_body" in sec:
            v = indexed(sec["response_body"], i, need_array, "response_body")
            if isinstance(v, dict):
                e["body_like"] = perl_re(v, "")
            elif isinstance(v, str) or v is None:
                e["body"] = v
            else:
                raise Skip("response_body: unsupported value")
        elif "response_body_like" in sec or "response_body_unlike" in sec:
            key = "response_body_like" if "response_body_like" in sec else "response_body_unlike"
            v = indexed(sec[key], i, need_array, key)
            if v is None:
                raise Skip(key + ": empty")
            e["body_like" if key == "response_body_like" else "body_unlike"] = perl_re(v, "s")
        if "response_headers" in sec:
            v = indexed(sec["response_headers"], i, need_array, "response_headers")
            if not isinstance(v, str):
                raise Skip("response_headers: unsupported value")
            e["headers"] = [[k, re.sub(r"\$ServerPort(ForClient)?\b", "@@SERVER_PORT@@", x) if x is not None else None]
                            for k, x in parse_headers_spec(v)]
        elif "response_headers_like" in sec:
            v = indexed(sec["response_headers_like"], i, need_array, "response_headers_like")
            if not isinstance(v, str):
                raise Skip("response_headers_like: unsupported value")
            e["headers_like"] = [[k, perl_re("^" + x + "$", "")] for k, x in parse_headers_spec(v) if x is not None]
        for key, out in (("raw_response_headers_like", "raw_headers_like"), ("raw_response_headers_unlike", "raw_headers_unlike")):
            if key in sec:
                e[out] = perl_re(indexed(sec[key], i, need_array, key), "s")
        expect.append(e)

    timeout = DEFAULT_TIMEOUT
    if isinstance(sec.get("timeout"), str):
        try:
            timeout = min(float(re.sub(r"[^\d.]", "", sec["timeout"]) or DEFAULT_TIMEOUT), MAX_TIMEOUT)
        except ValueError:
            pass
    return {
        "repeat": int(flags.get("repeat_each") or 1),
        "config": conf,
        "http_extra": [httpc[x["start"]:x["end"]] for x in server_level_http],
        "routes": routes,
        "dicts": dicts,
        "init": init,
        "init_nginx": init_raw,
        "env": env_lines,
        "root_location": not flags.get("no_root_location") and not any(
            r["match"] == "prefix" and r["path"] == "/" for r in routes),
        "requests": requests,
        "expect": expect,
        "timeout": timeout,
    }


def lua_quote(s):
    out = []
    for c in b(s):
        if c in (0x22, 0x5c):
            out.append("\\" + chr(c))
        elif 0x20 <= c < 0x7f:
            out.append(chr(c))
        else:
            out.append(f"\\{c:03d}")
    return '"' + "".join(out) + '"'


def echo_lua(args):
    """ngx_echo's `echo [-n] [--] args...` (arguments joined by a space, a newline unless -n,
    NGINX variables interpolated) as Lua."""
    args = list(args)
    nl = True
    while args and args[0].startswith("-"):
        a = args.pop(0)
        if a == "-n":
            nl = False
        elif a == "--":
            break
        else:
            raise Skip("echo module content")
    text = " ".join(args) + ("\n" if nl else "")
    parts = []
    pos = 0
    for m in re.finditer(r"\$(?:\{(\w+)\}|(\w+))", text):
        if m.start() > pos:
            parts.append(lua_quote(text[pos:m.start()]))
        parts.append(f'(ngx.var.{m.group(1) or m.group(2)} or "")')
        pos = m.end()
    if pos < len(text):
        parts.append(lua_quote(text[pos:]))
    return "ngx.print(" + (" .. ".join(parts) or '""') + ")\n"


def directive_reason(name, prefix):
    for pat, reason in DIRECTIVE_REASONS:
        if re.search(pat, name):
            return reason
    if name.endswith("_by_lua") or name.endswith("_by_lua_block"):
        return prefix + name
    return "directive: " + prefix + name


def convert(repo):
    def git(*a):
        return subprocess.run(["git", "-C", str(repo), *a], capture_output=True, check=True).stdout
    commit = git("rev-parse", f"{TAG}^{{commit}}").decode().strip()
    files = sorted(f for f in git("ls-tree", "-r", "--name-only", TAG, "t/").decode().split("\n") if f.endswith(".t"))
    cases = []
    for path in files:
        short = path[2:]
        d = read_blocks(git("show", f"{TAG}:{path}"))
        for blk in d["blocks"]:
            m = re.match(r"TEST\s+(\d+)\s*:?\s*(.*)", blk["name"])
            num = int(m.group(1)) if m else 0
            name = (m.group(2) if m else blk["name"]).strip()
            case = {"id": f"{short}:TEST {num}", "file": short, "test": num, "name": name}
            try:
                case.update(convert_case(short, d["flags"], d["env"], blk))
                case["skip"] = None
            except Skip as e:
                case["skip"] = str(e)
            cases.append(case)
    ids = {}
    for c in cases:
        if c["id"] in ids:
            ids[c["id"]] += 1
            c["id"] += f"#{ids[c['id']]}"
        else:
            ids[c["id"]] = 1
    out = {
        "source": {"repository": "https://github.com/openresty/lua-nginx-module", "tag": TAG, "commit": commit,
                   "files": [p[2:] for p in files]},
        "license": LICENSE_TEXT,
        "generated_by": "bench/luat --convert",
        "cases": cases,
    }
    CASES.write_text(json.dumps(out, indent=1, sort_keys=True, ensure_ascii=True) + "\n")
    ported = sum(1 for c in cases if not c["skip"])
    log(f"{CASES.relative_to(ROOT)}: {len(cases)} cases from {len(files)} files, {ported} ported ({TAG} {commit[:12]})")


# --------------------------------------------------------------------------------------------
# Step 2: the run.

def sluice_binary(arg):
    cands = []
    if arg:
        cands.append(Path(arg))
    if os.environ.get("SLUICE_BIN"):
        cands.append(Path(os.environ["SLUICE_BIN"]))
    if os.environ.get("CARGO_TARGET_DIR"):
        cands.append(Path(os.environ["CARGO_TARGET_DIR"]) / "debug" / "sluice")
    cands.append(ROOT / "target" / "debug" / "sluice")
    cands.append(Path.home() / ".cache" / "sluice" / "ci-target" / "debug" / "sluice")
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise SystemExit("bench/luat: no sluice binary (tried " + ", ".join(map(str, cands)) + "); cargo build -p sluice")


PORT_LOCK = threading.Lock()
HANDED_OUT = set()


def free_ports(n):
    """n ports free now, none handed out before in this run."""
    socks, ports = [], []
    with PORT_LOCK:
        try:
            for _ in range(4 * n + 100):
                if len(ports) == n:
                    break
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                socks.append(s)
                port = s.getsockname()[1]
                if port not in HANDED_OUT:
                    ports.append(port)
                    HANDED_OUT.add(port)
        finally:
            for s in socks:
                s.close()
    if len(ports) < n:
        raise RuntimeError("bench/luat: no free ports")
    return ports


class Origin(http.server.BaseHTTPRequestHandler):
    """The upstream of every route: 200, empty body."""
    protocol_version = "HTTP/1.1"

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def __getattr__(self, name):
        if name.startswith("do_"):
            return self.answer
        raise AttributeError(name)

    def log_message(self, *a):
        pass


class OriginServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def toml_str(s):
    """A TOML string holding s exactly (multi-line literal where it can)."""
    if any("\udc80" <= c <= "\udcff" for c in s):
        raise ValueError("Lua source is not UTF-8")
    if "'''" not in s and not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", s) and not s.endswith("'"):
        return "'''\n" + s + "'''"
    out = []
    for c in s:
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n":
            out.append("\n")
        elif c == "\t":
            out.append("\t")
        elif ord(c) < 0x20 or c == "\x7f":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"""\n' + "".join(out) + '"""'


def subst(s, port, d):
    return (s.replace("@@SERVER_PORT@@", str(port)).replace("@@HTML_DIR@@", f"{d}/html")
            .replace("@@SERVER_ROOT@@", str(d)))


def nginx_conf(d, batch, ports):
    first = batch[0]
    http = []
    for name, size in sorted(merge_dicts(batch).items()):
        http.append(f"    lua_shared_dict {name} {size};")
    if first.get("init_nginx"):
        http.append("    " + first["init_nginx"])
    env = sorted({e for c in batch for e in c.get("env", [])})
    servers = []
    for c in batch:
        port = ports[c["id"]][0]
        root = f"        location / {{\n            root {d}/html;\n            index index.html index.htm;\n        }}\n" if c["root_location"] else ""
        servers.append(f"    server {{\n        listen 127.0.0.1:{port};\n        server_name 'localhost';\n"
                       f"        client_max_body_size 30M;\n\n{''.join('        ' + x + chr(10) for x in c.get('http_extra', []))}{subst(c['config'], port, d)}\n\n{root}    }}\n")
    echo = f"load_module {MODULES}/ngx_http_echo_module.so;\n" if (MODULES / "ngx_http_echo_module.so").exists() else ""
    return (f"load_module {MODULES}/ndk_http_module.so;\nload_module {MODULES}/ngx_http_lua_module.so;\n{echo}"
            f"daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {d}/nginx-error.log warn;\n"
            f"pid {d}/nginx.pid;\n" + "".join(e + "\n" for e in env) +
            f"events {{ worker_connections 1024; }}\nhttp {{\n    access_log off;\n"
            f"    client_body_temp_path {d}/tmp-body;\n    proxy_temp_path {d}/tmp-proxy;\n"
            f"    fastcgi_temp_path {d}/tmp-fcgi;\n    uwsgi_temp_path {d}/tmp-uwsgi;\n    scgi_temp_path {d}/tmp-scgi;\n"
            f"    default_type text/plain;\n    keepalive_timeout 68000ms;\n" + "\n".join(http) + "\n" + "".join(servers) + "}\n")


def merge_dicts(batch):
    out = {}
    for c in batch:
        out.update(c.get("dicts") or {})
    return out


# `--interpreter`: Sluice runs with `[lua] jit = false` (by default the compiler is on, every chunk
# with the budget's polls).
INTERPRETER = False


def sluice_conf(d, batch, ports, origin, mapping):
    first = batch[0]
    lua = ["[lua]"] + (["jit = false"] if INTERPRETER else [])
    dicts = merge_dicts(batch)
    if dicts:
        lua.append("shared_dicts = { " + ", ".join(f'"{k}" = "{v}"' for k, v in sorted(dicts.items())) + " }")
    if first.get("init"):
        lua.append("init = " + toml_str(subst(first["init"], ports[first["id"]][1], d)))
    out = ['[global]\nshutdown_timeout = "1s"\n[log]\nlevel = "warn"\n[admin]\nenabled = false\n',
           "\n".join(lua) + "\n" if len(lua) > 1 else "",
           f'[[upstream]]\nname = "origin"\nservers = [{{ address = "127.0.0.1:{origin}" }}]\n']
    # c{i}: the case's place in its whole batch (ports[id][2]), whichever subset this is.
    for c in batch:
        out.append(f'[[listener]]\nname = "c{ports[c["id"]][2]}"\naddress = "127.0.0.1:{ports[c["id"]][1]}"\n')
    for c in batch:
        out.append(sluice_routes(d, c, ports[c["id"]][2], ports[c["id"]][1], mapping))
    return "".join(out)


def sluice_routes(d, c, i, port, mapping):
    out = []
    for j, r in enumerate(c["routes"]):
        path = r["path"]
        key = {"exact": "path_exact", "prefix": "path_prefix", "regex": "path_regex", "regex_i": "path_regex"}[r["match"]]
        if r["match"] == "regex_i":
            path = "(?i)" + path
        s = [f'[[route]]\nname = "c{i}-{j}"\nlisteners = ["c{i}"]\n{key} = {json.dumps(path)}\nupstream = "origin"\nmax_request_body = "30m"\n']
        if r["request_buffering"]:
            s.append("request_buffering = true\n")
        lua = dict(r["lua"])
        if "content" in lua and mapping == "access":
            if "access" in lua:
                raise ValueError("access_by_lua and content_by_lua in one location need [route.lua] content")
            lua["access"] = lua.pop("content")
        if lua:
            s.append("[route.lua]\n")
            for phase in ("rewrite", "access", "content", "header_filter", "body_filter", "log"):
                if phase in lua:
                    s.append(f"{phase} = {toml_str(subst(lua[phase], port, d))}\n")
        out.append("".join(s))
    return "".join(out)


def sluice_check(binary, path):
    r = subprocess.run([str(binary), "check", "--config", str(path)], capture_output=True, text=True, timeout=60)
    msg = "\n".join(l for l in (r.stdout + r.stderr).splitlines() if "private-key engines" not in l and ": OK (" not in l)
    return r.returncode == 0, msg.strip()


def nginx_check(path, d):
    r = subprocess.run(["nginx", "-t", "-q", "-c", str(path), "-p", str(d)], capture_output=True, text=True, timeout=60)
    return r.returncode == 0, r.stderr.strip()


def probe_mapping(binary, d):
    """Does `sluice check` accept `[route.lua] content`?"""
    p = Path(d, "probe.toml")
    p.write_text('[admin]\nenabled = false\n[[listener]]\nname = "l"\naddress = "127.0.0.1:1"\n'
                 '[[upstream]]\nname = "o"\nservers = [{ address = "127.0.0.1:2" }]\n'
                 '[[route]]\nname = "r"\nupstream = "o"\n[route.lua]\ncontent = \'\'\'ngx.say("x")\'\'\'\n')
    ok, _ = sluice_check(binary, p)
    return "content" if ok else "access"


class Proc:
    def __init__(self, argv, out, cwd=None):
        self.f = open(out, "wb")
        self.p = subprocess.Popen(argv, stdout=self.f, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        self.f.close()


def wait_ports(proc, ports, timeout=20.0):
    end = time.monotonic() + timeout
    for port in ports:
        while True:
            if not proc.alive():
                return False
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > end:
                    return False
                time.sleep(0.05)
    return True


# HTTP exchange -----------------------------------------------------------------------------

def exchange(port, data, methods, timeout):
    """Send the bytes, read the responses (as many as requests): a list of dicts or an error."""
    buf = b""
    deadline = time.monotonic() + timeout
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError as e:
        return [], f"connect: {e}"
    err = None
    try:
        s.sendall(data)
        while True:
            got = parse_responses(buf, methods, eof=False)
            if got is not None and len(got) >= len(methods):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                err = "timed out"
                break
            s.settimeout(left)
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                err = "timed out"
                break
            except OSError as e:
                err = f"recv: {e}"
                break
            if not chunk:
                break
            buf += chunk
    except OSError as e:
        err = f"send: {e}"
    finally:
        s.close()
    got = parse_responses(buf, methods, eof=True) or []
    if len(got) < len(methods) and err is None:
        err = "connection closed" if buf else "no response"
    return got, err


def parse_responses(buf, methods, eof):
    out = []
    pos = 0
    for i, meth in enumerate(methods):
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            return out if eof else None
        head = buf[pos:end].decode("latin-1")
        lines = head.split("\r\n")
        m = re.match(r"HTTP/\d\.\d\s+(\d{3})", lines[0])
        status = int(m.group(1)) if m else None
        headers = []
        for l in lines[1:]:
            if ":" in l:
                k, v = l.split(":", 1)
                headers.append((k.strip(), v.strip()))
        hmap = {}
        for k, v in headers:
            hmap.setdefault(k.lower(), []).append(v)
        body_start = end + 4
        te = ",".join(hmap.get("transfer-encoding", [])).lower()
        cl = hmap.get("content-length")
        no_body = meth == "HEAD" or status in (204, 304) or (status is not None and 100 <= status < 200)
        if meth == "HEAD" and i == len(methods) - 1:
            # The last response of the connection: read to the close, framed as any response
            # (a script may turn a HEAD into a GET; Test::Nginx reads to the end too).
            if not eof:
                return None
            no_body = status in (204, 304) or (status is not None and 100 <= status < 200)
        if no_body:
            body, pos = b"", body_start
        elif "chunked" in te:
            body, p = b"", body_start
            while True:
                le = buf.find(b"\r\n", p)
                if le < 0:
                    if eof:
                        out.append(dict(status=status, headers=headers, hmap=hmap, raw=head + "\r\n", body=body, incomplete=True))
                        return out
                    return None
                try:
                    size = int(buf[p:le].split(b";")[0].strip() or b"0", 16)
                except ValueError:
                    size = 0
                if size == 0:
                    t = buf.find(b"\r\n\r\n", le)
                    if t < 0 and not eof:
                        return None
                    pos = (t + 4) if t >= 0 else len(buf)
                    break
                if le + 2 + size + 2 > len(buf):
                    if eof:
                        body += buf[le + 2:le + 2 + size]
                        out.append(dict(status=status, headers=headers, hmap=hmap, raw=head + "\r\n", body=body, incomplete=True))
                        return out
                    return None
                body += buf[le + 2:le + 2 + size]
                p = le + 2 + size + 2
        elif cl:
            n = int(cl[0]) if cl[0].isdigit() else 0
            if body_start + n > len(buf):
                if eof:
                    out.append(dict(status=status, headers=headers, hmap=hmap, raw=head + "\r\n", body=buf[body_start:], incomplete=True))
                    return out
                return None
            body, pos = buf[body_start:body_start + n], body_start + n
        else:
            if not eof:
                return None
            body, pos = buf[body_start:], len(buf)
        out.append(dict(status=status, headers=headers, hmap=hmap, raw=head + "\r\n", body=body, incomplete=False))
    return out


def short(x, n=120):
    if isinstance(x, bytes):
        x = x.decode("utf-8", "replace")
    x = repr(x)
    return x if len(x) <= n else x[:n] + "…"


def check(e, r, port, d):
    """The first mismatch between an expectation and a response, or None."""
    def sub(s):
        return subst(re.sub(r"\$ServerPort(ForClient)?\b", "@@SERVER_PORT@@", s), port, d)

    def rx(spec):
        return re.compile(b(subst(spec["re"], port, d)), re_flags(spec["flags"]))

    if "status_like" in e:
        if not rx(e["status_like"]).search(str(r["status"] or "").encode()):
            return f"status {r['status']}, expected like /{e['status_like']['re']}/"
    elif e.get("status") is not None and str(r["status"] or "") != e["status"]:
        return f"status {r['status']}, expected {e['status']}"
    if "body" in e:
        want = b(sub(e["body"])) if e["body"] is not None else None
        if want is not None and r["body"] != want:
            return f"body {short(r['body'])}, expected {short(want)}"
    if "body_like" in e and not rx(e["body_like"]).search(r["body"]):
        return f"body {short(r['body'])}, expected like /{short(e['body_like']['re'], 80)[1:-1]}/"
    if "body_unlike" in e and rx(e["body_unlike"]).search(r["body"]):
        return f"body {short(r['body'])}, expected unlike /{e['body_unlike']['re']}/"
    for k, v in e.get("headers", []):
        got = r["hmap"].get(k.lower())
        if v is None:
            if got is not None:
                return f"header {k}: {short(', '.join(got))}, expected absent"
            continue
        have = ", ".join(got) if got else ""
        if have != sub(v):
            return f"header {k}: {short(have) if got else 'absent'}, expected {short(sub(v))}"
    for k, spec in e.get("headers_like", []):
        got = ", ".join(r["hmap"].get(k.lower()) or [])
        if not rx(spec).search(got.encode("latin-1", "replace")):
            return f"header {k}: {short(got)}, expected like /{spec['re']}/"
    if "raw_headers_like" in e and not rx(e["raw_headers_like"]).search(r["raw"].encode("latin-1")):
        return f"raw headers {short(r['raw'])}, expected like /{e['raw_headers_like']['re']}/"
    if "raw_headers_unlike" in e and rx(e["raw_headers_unlike"]).search(r["raw"].encode("latin-1")):
        return f"raw headers expected unlike /{e['raw_headers_unlike']['re']}/"
    return None


def run_case(c, port, d):
    """pass (None) or the first mismatch on one gateway."""
    for rep in range(c["repeat"]):
        idx = 0
        for req in c["requests"]:
            data = b(subst(req["data"], port, d))
            got, err = exchange(port, data, req["methods"], c["timeout"])
            for k in range(len(req["methods"])):
                e = c["expect"][idx]
                idx += 1
                if k >= len(got) and err in ("no response", "connection closed"):
                    # Test::Nginx parses nothing as a response without a status and with an
                    # empty body (what `--- error_code:` with an empty value expects).
                    got.append(dict(status=None, headers=[], hmap={}, raw="", body=b"", incomplete=True))
                if k >= len(got):
                    return f"{'repeat 2: ' if rep else ''}{'request %d: ' % idx if len(c['expect']) > 1 else ''}{err or 'no response'}"
                why = check(e, got[k], port, d)
                if why:
                    return f"{'repeat 2: ' if rep else ''}{'request %d: ' % idx if len(c['expect']) > 1 else ''}{why}"
    return None


# Batches -----------------------------------------------------------------------------------

def alone(c):
    """Cases that see what other cases in their process do: timers (ngx.timer.*_count, timers
    still running), and the dictionaries' capacity."""
    code = " ".join(v for r in c["routes"] for v in r["lua"].values()) + (c.get("init") or "")
    return "ngx.timer" in code


def batches(cases):
    """Cases sharing an init and no shared dictionary name (or one size per name), BATCH_MAX
    at most."""
    out = []
    for c in cases:
        if alone(c):
            out.append({"key": None, "cases": [c], "names": set()})
            continue
        key = (c.get("init") or "", tuple(c.get("env") or []))
        names = set(c.get("dicts") or {})
        for bt in out:
            if bt["key"] != key or len(bt["cases"]) >= BATCH_MAX or bt["names"] & names:
                continue
            bt["cases"].append(c)
            bt["names"] |= names
            break
        else:
            out.append({"key": key, "cases": [c], "names": set(names)})
    return [bt["cases"] for bt in out]


def bisect_bad(cases, ok):
    """The cases whose configuration `ok(subset)` refuses on its own (every subset of good ones
    passes)."""
    if ok(cases):
        return []
    if len(cases) == 1:
        return cases
    mid = len(cases) // 2
    return bisect_bad(cases[:mid], ok) + bisect_bad(cases[mid:], ok)


def run_batch(n, batch, binary, origin, mapping, base, which=("nginx", "sluice")):
    d = Path(base, f"b{n}")
    (d / "html").mkdir(parents=True, exist_ok=True)
    (d / "logs").mkdir(exist_ok=True)
    results = {c["id"]: {"nginx": None, "sluice": None} for c in batch}
    ports = {}
    allp = free_ports(2 * len(batch))
    for i, c in enumerate(batch):
        ports[c["id"]] = (allp[2 * i], allp[2 * i + 1], i)

    # NGINX: cases whose configuration NGINX refuses fail there.
    def nginx_ok(sub):
        p = d / "nginx-check.conf"
        p.write_text(nginx_conf(d, sub, ports))
        return nginx_check(p, d)[0]
    nb = batch if "nginx" in which else []
    if nb and not nginx_ok(batch):
        bad = bisect_bad(batch, nginx_ok)
        for c in bad:
            p = d / "nginx-check.conf"
            p.write_text(nginx_conf(d, [c], ports))
            results[c["id"]]["nginx"] = "nginx -t: " + short(nginx_check(p, d)[1], 200)
        nb = [c for c in batch if c not in bad]

    # Sluice: cases it cannot express, or whose configuration `sluice check` refuses, fail there.
    sb = []
    for i, c in enumerate(batch if "sluice" in which else []):
        try:
            sluice_routes(d, c, i, 1, mapping)
            if c.get("init"):
                toml_str(c["init"])
            sb.append(c)
        except ValueError as e:
            results[c["id"]]["sluice"] = f"not expressible: {e}"

    def sluice_ok(sub):
        p = d / "sluice-check.toml"
        p.write_text(sluice_conf(d, sub, ports, origin, mapping))
        return sluice_check(binary, p)[0]
    if sb and not sluice_ok(sb):
        bad = bisect_bad(sb, sluice_ok)
        for c in bad:
            p = d / "sluice-check.toml"
            p.write_text(sluice_conf(d, [c], ports, origin, mapping))
            results[c["id"]]["sluice"] = "sluice check: " + short(sluice_check(binary, p)[1], 300)
        sb = [c for c in sb if c not in bad]

    procs = []
    try:
        if nb:
            (d / "nginx.conf").write_text(nginx_conf(d, nb, ports))
            ng = Proc(["nginx", "-c", str(d / "nginx.conf"), "-p", str(d)], d / "nginx.out")
            procs.append(ng)
            if not wait_ports(ng, [ports[nb[0]["id"]][0], ports[nb[-1]["id"]][0]]):
                for c in nb:
                    results[c["id"]]["nginx"] = "nginx did not start: " + short((d / "nginx-error.log").read_text()[-300:] if (d / "nginx-error.log").exists() else "", 300)
                nb = []
        if sb:
            (d / "sluice.toml").write_text(sluice_conf(d, sb, ports, origin, mapping))
            sl = Proc([str(binary), "run", "--config", str(d / "sluice.toml"), "--pid-file", str(d / "sluice.pid")], d / "sluice.out")
            procs.append(sl)
            if not wait_ports(sl, [ports[sb[0]["id"]][1], ports[sb[-1]["id"]][1]]):
                for c in sb:
                    results[c["id"]]["sluice"] = "sluice did not start: " + short((d / "sluice.out").read_text()[-300:], 300)
                sb = []
        nset, sset = {c["id"] for c in nb}, {c["id"] for c in sb}

        def one(c):
            r = results[c["id"]]
            if c["id"] in nset:
                r["nginx"] = run_case(c, ports[c["id"]][0], d) or "pass"
            if c["id"] in sset:
                r["sluice"] = run_case(c, ports[c["id"]][1], d) or "pass"
        with concurrent.futures.ThreadPoolExecutor(PARALLEL) as ex:
            list(ex.map(one, batch))
    finally:
        for p in reversed(procs):
            p.stop()
    # Sluice's log: the first Lua error of each failing case (its routes are c{i}-*).
    if sb and (d / "sluice.out").exists():
        errs = sluice_errors((d / "sluice.out").read_text(errors="replace"))
        for i, c in enumerate(batch):
            r = results[c["id"]]
            if r["sluice"] not in (None, "pass") and i in errs:
                r["sluice_log"] = errs[i].replace(str(d) + "/", "")
    for r in results.values():
        for g in ("nginx", "sluice"):
            if r[g]:
                r[g] = r[g].replace(str(d) + "/", "")
    return {k: {g: v for g, v in r.items() if g.split("_")[0] in which} for k, r in results.items()}


def sluice_errors(text):
    """case index -> the first error line Sluice logged for one of its routes."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    out = {}
    for entry in re.split(r"\n(?=\d{4}-\d\d-\d\dT)", text):
        m = re.search(r'route="c(\d+)-\d+"', entry)
        if not m or int(m.group(1)) in out:
            continue
        first = entry.split("\n", 1)[0]
        first = re.sub(r"^\S+\s+(ERROR|WARN|INFO)\s+\S+:\s*", "", first)
        out[int(m.group(1))] = short(first, 200)[1:-1]
    return out


# Report ------------------------------------------------------------------------------------

def known():
    if not KNOWN.exists():
        return {}
    return {k: v for k, v in tomllib.loads(KNOWN.read_text()).items() if isinstance(v, str)}


def report(data, cases, results, listed, mapping, binary, smoke, elapsed):
    files = data["source"]["files"]
    per = {}
    skips = {}
    diffs = []
    for c in cases:
        f = per.setdefault(c["file"], {"cases": 0, "ported": 0, "nginx": 0, "sluice": 0, "both": 0, "differs": [], "skips": {}})
        f["cases"] += 1
        if c["skip"]:
            f["skips"][c["skip"]] = f["skips"].get(c["skip"], 0) + 1
            skips[c["skip"]] = skips.get(c["skip"], 0) + 1
            continue
        r = results.get(c["id"])
        if r is None:
            continue
        f["ported"] += 1
        np, sp = r["nginx"] == "pass", r["sluice"] == "pass"
        f["nginx"] += np
        f["sluice"] += sp
        f["both"] += np and sp
        if np and not sp:
            f["differs"].append(c)
            diffs.append(c)
    tot = {k: sum(f[k] for f in per.values()) for k in ("cases", "ported", "nginx", "sluice", "both")}
    unexplained = [c["id"] for c in diffs if c["id"] not in listed]
    ran = {c["id"] for c in cases if c["id"] in results}
    stale = sorted(k for k in listed if k in ran and results[k]["sluice"] == "pass")
    out = [f"# lua-nginx-module {data['source']['tag']}'s tests on NGINX and Sluice{' (smoke subset)' if smoke else ''}", ""]
    out.append(f"Cases from `t/*.t` of openresty/lua-nginx-module {data['source']['tag']} ({data['source']['commit'][:12]}), "
               f"converted by `bench/luat --convert` into bench/luat-cases.json; run by `bench/luat{' --smoke' if smoke else ''}` "
               f"on {datetime.date.today().isoformat()} in {elapsed:.0f} s. NGINX: Debian's 1.22 with lua-nginx-module 0.10.23; "
               f"Sluice: `{binary}`; content_by_lua mapped to `[route.lua] {mapping}`. A case passes when its status, body and "
               f"headers are the test's; `error_log`/`no_error_log`/`grep_error_log` sections are not compared. Each case has its "
               f"own port on each gateway; a case that fails beside the others of its batch is run again alone, and that "
               f"result counts. `echo` (ngx_echo) content runs as the module in NGINX and as an equivalent content script in Sluice.")
    out.append("")
    out.append("| cases | ported | NGINX passes | Sluice passes | both pass | Sluice fails where NGINX passes | of them unlisted | stale list entries |")
    out.append("|---|---|---|---|---|---|---|---|")
    out.append(f"| {tot['cases']} | {tot['ported']} | {tot['nginx']} | {tot['sluice']} | {tot['both']} | {len(diffs)} | {len(unexplained)} | {len(stale)} |")
    out.append("")
    out.append("## Per file")
    out.append("")
    out.append("| file | cases | ported | NGINX | Sluice | both | Sluice fails, NGINX passes | skipped (top reasons) |")
    out.append("|---|---|---|---|---|---|---|---|")
    for name in files:
        f = per.get(name)
        if not f:
            continue
        top = ", ".join(f"{r} ({n})" for r, n in sorted(f["skips"].items(), key=lambda x: (-x[1], x[0]))[:3])
        out.append(f"| {name} | {f['cases']} | {f['ported']} | {f['nginx']} | {f['sluice']} | {f['both']} | {len(f['differs'])} | {top} |")
    out.append("")
    out.append("## Sluice fails where NGINX passes")
    out.append("")
    for name in files:
        f = per.get(name)
        if not f or not f["differs"]:
            continue
        out.append(f"### {name}")
        out.append("")
        for c in f["differs"]:
            why = results[c["id"]]["sluice"].replace("|", "\\|").replace("\n", " ")
            if results[c["id"]].get("sluice_log"):
                why += f" (Sluice's log: {results[c['id']]['sluice_log']})"
            mark = "" if c["id"] not in listed else " (listed)"
            out.append(f"- TEST {c['test']}: {c['name']}{mark}: {why}")
        out.append("")
    out.append("## Skipped cases by reason")
    out.append("")
    out.append("| reason | cases |")
    out.append("|---|---|")
    for r, n in sorted(skips.items(), key=lambda x: (-x[1], x[0])):
        out.append(f"| {r.replace('|', '/')} | {n} |")
    nf = [(c, results[c["id"]]["nginx"]) for c in cases if c["id"] in results and results[c["id"]]["nginx"] != "pass"]
    out.append("")
    out.append(f"## Cases NGINX fails ({len(nf)}; the port's or the environment's, not Sluice's)")
    out.append("")
    for c, why in nf:
        out.append(f"- {c['id']}: {c['name']}: {why.replace(chr(10), ' ')}")
    return "\n".join(out) + "\n", {"totals": tot, "differs": [c["id"] for c in diffs], "unexplained": unexplained, "stale": stale}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--convert", action="store_true", help="regenerate bench/luat-cases.json from the git mirror")
    ap.add_argument("--repo", default=str(MIRROR), help="a git clone or mirror of openresty/lua-nginx-module")
    ap.add_argument("--smoke", action="store_true", help="a few files (CI)")
    ap.add_argument("--file", action="append", help="only these test files (e.g. 034-match.t); repeatable")
    ap.add_argument("--case", action="append", help="only these case ids (034-match.t:TEST 3); repeatable")
    ap.add_argument("--sluice", help="the sluice binary (default: $CARGO_TARGET_DIR/debug/sluice, then target/debug, then ~/.cache/sluice/ci-target/debug)")
    ap.add_argument("--mapping", choices=["auto", "content", "access"], default="auto",
                    help="content_by_lua as [route.lua] content, or as access (default: content where sluice check accepts it)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--interpreter", action="store_true",
                    help="run Sluice with [lua] jit = false (the interpreter alone)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it: configurations and logs")
    args = ap.parse_args()
    if args.convert:
        convert(Path(args.repo))
        return
    data = json.loads(CASES.read_text())
    cases = data["cases"]
    if args.smoke:
        cases = [c for c in cases if c["file"] in SMOKE]
    if args.file:
        cases = [c for c in cases if c["file"] in args.file]
    if args.case:
        cases = [c for c in cases if c["id"] in args.case]
    binary = sluice_binary(args.sluice)
    global INTERPRETER
    INTERPRETER = args.interpreter
    listed = known()
    t0 = time.monotonic()
    with (tempfile.TemporaryDirectory(prefix="sluice-luat-") if not args.keep else _keep(args.keep)) as base:
        os.chmod(base, 0o755)
        mapping = probe_mapping(binary, base) if args.mapping == "auto" else args.mapping
        log(f"sluice: {binary}; content_by_lua -> [route.lua] {mapping}")
        origin = OriginServer(("127.0.0.1", 0), Origin)
        threading.Thread(target=origin.serve_forever, daemon=True).start()
        todo = [c for c in cases if not c["skip"]]
        bts = batches(todo)
        log(f"{len(cases)} cases, {len(todo)} ported, in {len(bts)} batches")
        results = {}
        try:
            with concurrent.futures.ThreadPoolExecutor(BATCHES_AT_ONCE) as ex:
                jobs = [ex.submit(run_batch, n, bt, binary, origin.server_address[1], mapping, base)
                        for n, bt in enumerate(bts)]
                for n, job in enumerate(jobs):
                    results.update(job.result())
                    if (n + 1) % 20 == 0 or n + 1 == len(bts):
                        log(f"batch {n + 1}/{len(bts)}: {len(results)} cases run")
            # A case that failed beside others runs again alone on that gateway (NGINX starts
            # afresh for each test block; the batch's Lua VM is shared): the alone result counts.
            again = [(c, tuple(g for g in ("nginx", "sluice") if results[c["id"]][g] != "pass")) for c in todo]
            again = [(c, w) for c, w in again if w and len(batches([c])) == 1 and not alone(c)]
            log(f"{len(again)} cases that failed in a batch, again alone")

            def solo(job):
                i, (c, w) = job
                return c["id"], run_batch(f"solo{i}", [c], binary, origin.server_address[1], mapping, base, w)[c["id"]]
            with concurrent.futures.ThreadPoolExecutor(PARALLEL) as ex:
                for cid, r in ex.map(solo, enumerate(again)):
                    for g, v in r.items():
                        if v == "pass" and results[cid][g] != "pass":
                            results[cid].setdefault("alone", []).append(g)
                        results[cid][g] = v
        finally:
            origin.shutdown()
    md, summary = report(data, cases, results, listed, mapping, binary, args.smoke or bool(args.file or args.case), time.monotonic() - t0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "luat-smoke" if args.smoke else "luat" if not (args.file or args.case) else "luat-subset"
    (out / f"{stem}.md").write_text(md)
    (out / f"{stem}.json").write_text(json.dumps({
        "source": data["source"], "mapping": mapping, "sluice": str(binary), "summary": summary,
        "results": {c["id"]: results[c["id"]] for c in cases if c["id"] in results},
        "skipped": {c["id"]: c["skip"] for c in cases if c["skip"]},
    }, indent=1, sort_keys=True) + "\n")
    t = summary["totals"]
    log(f"{t['ported']} ported: NGINX passes {t['nginx']}, Sluice {t['sluice']}, both {t['both']}; "
        f"Sluice fails where NGINX passes: {len(summary['differs'])} ({len(summary['unexplained'])} unlisted); "
        f"report: {out / (stem + '.md')}")
    bad = []
    if summary["unexplained"]:
        bad.append(f"NGINX passes and Sluice fails, not in {KNOWN.name}: " + ", ".join(summary["unexplained"][:50])
                   + (" …" if len(summary["unexplained"]) > 50 else ""))
    if summary["stale"]:
        bad.append(f"listed in {KNOWN.name} but Sluice passes now (remove them): " + ", ".join(summary["stale"]))
    if bad:
        raise SystemExit("bench/luat: " + "\n".join(bad))


class _keep:
    def __init__(self, d):
        self.d = d

    def __enter__(self):
        Path(self.d).mkdir(parents=True, exist_ok=True)
        return self.d

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    main()
