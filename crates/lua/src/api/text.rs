//! `ngx.escape_uri`, `unescape_uri`, `encode_args`, `decode_args`, base64, digests and
//! time: pure functions of their arguments, as lua-nginx-module defines them.

use crate::values::{Text, scalar_bytes};
use base64::Engine as _;
use boring::hash::{MessageDigest, hash};
use mlua::{Lua, LuaString, Table, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// lua-nginx-module 0.10.23's escape tables (`ngx_http_lua_escape_uri`), one bit per byte,
/// set where the byte is escaped: `ngx.escape_uri`'s types 0 (a URI), 1 (arguments), 2 (a
/// URI component, the default), 3 (HTML), 4 (refresh), 5 (memcached), 6 (mail auth, the
/// memcached table), and the header name (7) and value (8) tables `ngx.req.set_header` and
/// `ngx.header` escape with.
const ESCAPES: [[u32; 8]; 9] = {
    const HIGH: u32 = 0xffff_ffff;
    const MEMCACHED: [u32; 8] = [HIGH, 0x0000_0021, 0, 0, 0, 0, 0, 0];
    [
        [HIGH, 0x8000_0029, 0, 0x8000_0000, HIGH, HIGH, HIGH, HIGH],
        [HIGH, 0x8000_0829, 0, 0x8000_0000, HIGH, HIGH, HIGH, HIGH],
        [
            HIGH,
            0xfc00_987d,
            0x7800_0001,
            0xb800_0001,
            HIGH,
            HIGH,
            HIGH,
            HIGH,
        ],
        [HIGH, 0x0000_00ad, 0, 0x8000_0000, HIGH, HIGH, HIGH, HIGH],
        [HIGH, 0x0000_0085, 0, 0x8000_0000, HIGH, HIGH, HIGH, HIGH],
        MEMCACHED,
        MEMCACHED,
        [
            HIGH,
            0xfc00_9305,
            0x3800_0001,
            0xa800_0000,
            HIGH,
            HIGH,
            HIGH,
            HIGH,
        ],
        [0xffff_fdff, 0, 0, 0x8000_0000, 0, 0, 0, 0],
    ]
};

/// The header tables' numbers in [`ESCAPES`].
pub(crate) const ESCAPE_HEADER_NAME: usize = 7;
pub(crate) const ESCAPE_HEADER_VALUE: usize = 8;

/// Whether table `kind` leaves `b` as it is.
pub(crate) fn kept(kind: usize, b: u8) -> bool {
    ESCAPES[kind][usize::from(b >> 5)] & (1 << (b & 31)) == 0
}

/// Percent-encodes `s` with upper-case hex, as NGINX does.
pub(crate) fn escape(s: &[u8], keep: impl Fn(u8) -> bool) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(s.len());
    for &b in s {
        if keep(b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    out
}

/// `ngx.escape_uri(s, type)`: type 2 (default) a URI component, 0 a whole URI, … 6
/// ([`ESCAPES`]); another type is refused, as lua-resty-core refuses it.
pub(crate) fn escape_uri(s: &[u8], kind: i64) -> mlua::Result<Vec<u8>> {
    let kind = usize::try_from(kind)
        .ok()
        .filter(|k| *k <= 6)
        .ok_or_else(|| mlua::Error::runtime(format!("\"type\" {kind} out of range")))?;
    Ok(escape(s, |b| kept(kind, b)))
}

/// `ngx.unescape_uri`: `%XX` decoded, `+` turned into a space (lua-nginx-module's
/// `ngx_http_lua_unescape_uri` does), a `%` not followed by two hex digits kept.
pub(crate) fn unescape_uri(s: &[u8]) -> Vec<u8> {
    unescape(s, true)
}

/// `%XX` decoded; `+` a space where `plus` says so (a query), kept in a path.
pub(crate) fn unescape(s: &[u8], plus: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' if i + 2 < s.len() => {
                if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b'+' if plus => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `ngx.decode_args(s, max)` and `ngx.req.get_uri_args`: decoded keys and values; a key
/// repeated gives an array of its values in order; a key without `=` is `true`.
pub(crate) fn decode_args(lua: &Lua, query: &[u8], max: usize) -> mlua::Result<(Table, bool)> {
    let t = lua.create_table()?;
    for (n, pair) in query
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .enumerate()
    {
        if max > 0 && n >= max {
            return Ok((t, true));
        }
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (
                &pair[..at],
                Value::String(lua.create_string(unescape_uri(&pair[at + 1..]))?),
            ),
            None => (pair, Value::Boolean(true)),
        };
        if k.is_empty() {
            continue;
        }
        let key = lua.create_string(unescape_uri(k))?;
        match t.raw_get::<Value>(&key)? {
            Value::Nil => t.raw_set(key, v)?,
            Value::Table(list) => list.raw_push(v)?,
            first => {
                let list = lua.create_sequence_from([first, v])?;
                t.raw_set(key, list)?;
            }
        }
    }
    Ok((t, false))
}

/// `ngx.encode_args(t)`: `k=v` pairs joined by `&`, each escaped as a URI component; a
/// `true` value gives the key alone, `false` leaves the key out, a table repeats the key.
pub(crate) fn encode_args(t: &Table) -> mlua::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut pair = |k: &[u8], v: Option<&[u8]>| {
        if !out.is_empty() {
            out.push(b'&');
        }
        out.extend(escape(k, |b| kept(2, b)));
        if let Some(v) = v {
            out.push(b'=');
            out.extend(escape(v, |b| kept(2, b)));
        }
    };
    for kv in t.pairs::<Value, Value>() {
        let (k, v) = kv?;
        let key = match &k {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Number(_) | Value::Integer(_) => crate::values::number_text(&k).into_bytes(),
            _ => {
                return Err(mlua::Error::runtime(
                    "bad argument #1 to 'encode_args' (bad key)",
                ));
            }
        };
        match v {
            Value::Boolean(true) => pair(&key, None),
            Value::Boolean(false) => {}
            Value::Table(list) => {
                for item in list.sequence_values::<Value>() {
                    match item? {
                        Value::Boolean(true) => pair(&key, None),
                        Value::Boolean(false) => {}
                        other => pair(&key, Some(scalar_bytes(&other)?.as_slice())),
                    }
                }
            }
            other => pair(&key, Some(scalar_bytes(&other)?.as_slice())),
        }
    }
    Ok(out)
}

/// Installs the pure functions on `ngx`.
pub(crate) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    install_uri(lua, ngx)?;
    install_base64(lua, ngx)?;
    install_digests(lua, ngx)?;
    install_time(lua, ngx)
}

/// `ngx.escape_uri`, `unescape_uri`, `encode_args`, `decode_args`.
fn install_uri(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    ngx.set(
        "escape_uri",
        crate::guard::function(
            lua,
            "ngx.escape_uri",
            |lua, (s, kind): (Text, Option<i64>)| {
                lua.create_string(escape_uri(&s.0, kind.unwrap_or(2))?)
            },
        )?,
    )?;
    ngx.set(
        "unescape_uri",
        crate::guard::function(lua, "ngx.unescape_uri", |lua, s: Text| {
            lua.create_string(unescape_uri(&s.0))
        })?,
    )?;
    ngx.set(
        "encode_args",
        crate::guard::function(lua, "ngx.encode_args", |lua, t: Table| {
            lua.create_string(encode_args(&t)?)
        })?,
    )?;
    ngx.set(
        "decode_args",
        crate::guard::function(
            lua,
            "ngx.decode_args",
            // A max of 0 or less takes every argument, as lua-resty-core's.
            |lua, (s, max): (LuaString, Option<i64>)| {
                let max = usize::try_from(max.unwrap_or(100)).unwrap_or(0);
                let (args, truncated) = decode_args(lua, &s.as_bytes(), max)?;
                Ok((args, truncated.then_some("truncated")))
            },
        )?,
    )?;
    Ok(())
}

/// `ngx.encode_base64`, `decode_base64`.
fn install_base64(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    ngx.set(
        "encode_base64",
        crate::guard::function(
            lua,
            "ngx.encode_base64",
            |lua, (s, no_pad): (Text, Value)| {
                let no_pad = match no_pad {
                    Value::Nil => false,
                    Value::Boolean(b) => b,
                    other => {
                        return Err(mlua::Error::runtime(format!(
                            "bad no_padding: boolean expected, got {}",
                            other.type_name()
                        )));
                    }
                };
                let e = if no_pad {
                    base64::engine::general_purpose::STANDARD_NO_PAD.encode(&s.0)
                } else {
                    base64::engine::general_purpose::STANDARD.encode(&s.0)
                };
                lua.create_string(e)
            },
        )?,
    )?;
    ngx.set(
        "decode_base64",
        crate::guard::function(lua, "ngx.decode_base64", |lua, s: Value| {
            let Value::String(s) = s else {
                return Err(mlua::Error::runtime("string argument only"));
            };
            // NGINX's decoder accepts the padding or its absence, nothing else.
            let bytes = s.as_bytes();
            let trimmed = bytes
                .strip_suffix(b"==")
                .or_else(|| bytes.strip_suffix(b"="));
            match base64::engine::general_purpose::STANDARD_NO_PAD.decode(trimmed.unwrap_or(&bytes))
            {
                Ok(d) => Ok(Value::String(lua.create_string(d)?)),
                Err(_) => Ok(Value::Nil),
            }
        })?,
    )?;
    Ok(())
}

/// `ngx.md5`, `md5_bin`, `sha1_bin`, `hmac_sha1`.
fn install_digests(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let digest = |md: fn() -> MessageDigest, hex_out: bool| {
        move |lua: &Lua, s: Text| {
            let d = hash(md(), &s.0).map_err(mlua::Error::external)?;
            if hex_out {
                let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
                lua.create_string(hex)
            } else {
                lua.create_string(&*d)
            }
        }
    };
    ngx.set(
        "md5",
        crate::guard::function(lua, "ngx.md5", digest(MessageDigest::md5, true))?,
    )?;
    ngx.set(
        "md5_bin",
        crate::guard::function(lua, "ngx.md5_bin", digest(MessageDigest::md5, false))?,
    )?;
    ngx.set(
        "sha1_bin",
        crate::guard::function(lua, "ngx.sha1_bin", digest(MessageDigest::sha1, false))?,
    )?;
    ngx.set(
        "hmac_sha1",
        crate::guard::function(
            lua,
            "ngx.hmac_sha1",
            |lua, (key, s): (LuaString, LuaString)| {
                let mac = boring::hash::hmac_sha1(&key.as_bytes(), &s.as_bytes())
                    .map_err(mlua::Error::external)?;
                lua.create_string(mac)
            },
        )?,
    )?;
    Ok(())
}

/// Seconds since the epoch, to the millisecond (`ngx.now`).
pub(crate) fn now() -> f64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_millis() as f64) / 1000.0
}

/// `ngx.now`, `time`, `update_time`, `today`, `utctime`, `localtime`, `http_time`,
/// `cookie_time`, `parse_http_time`. The clock is read at each call (`update_time` has
/// nothing to refresh: there is no cached time to go stale).
fn install_time(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    ngx.set(
        "now",
        crate::guard::function(lua, "ngx.now", |_, ()| Ok(now()))?,
    )?;
    ngx.set(
        "time",
        crate::guard::function(lua, "ngx.time", |_, ()| Ok(now().floor() as i64))?,
    )?;
    ngx.set(
        "update_time",
        crate::guard::function(lua, "ngx.update_time", |_, ()| Ok(()))?,
    )?;
    ngx.set(
        "http_time",
        crate::guard::function(lua, "ngx.http_time", |_, t: f64| Ok(http_date(t)))?,
    )?;
    ngx.set(
        "cookie_time",
        crate::guard::function(lua, "ngx.cookie_time", |_, t: f64| {
            // "Thu, 18-Nov-10 11:27:35 GMT", as `ngx_http_cookie_time` writes it: a
            // two-digit year, but for 2037 (its four digits, for old browsers' sake).
            let s = http_date(t);
            // "Thu, 18 Nov 2010 11:27:35 GMT" -> "Thu, 18-Nov-10 11:27:35 GMT"
            let mut parts: Vec<&str> = s.split(' ').collect();
            if parts.len() == 6 {
                let year = match parts[3] {
                    "2037" => "2037",
                    y => &y[y.len().saturating_sub(2)..],
                };
                let date = format!("{}-{}-{year}", parts[1], parts[2]);
                parts.splice(1..4, [date.as_str()]);
                return Ok(parts.join(" "));
            }
            Ok(s)
        })?,
    )?;
    ngx.set(
        "parse_http_time",
        crate::guard::function(lua, "ngx.parse_http_time", |_, s: String| {
            Ok(httpdate::parse_http_date(&s)
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs()))
        })?,
    )?;
    ngx.set(
        "utctime",
        crate::guard::function(lua, "ngx.utctime", |_, ()| Ok(utc(SystemTime::now(), " ")))?,
    )?;
    // The gateway keeps no local time zone: local time is UTC.
    ngx.set(
        "localtime",
        crate::guard::function(lua, "ngx.localtime", |_, ()| {
            Ok(utc(SystemTime::now(), " "))
        })?,
    )?;
    ngx.set(
        "today",
        crate::guard::function(lua, "ngx.today", |_, ()| {
            Ok(utc(SystemTime::now(), " ")[..10].to_owned())
        })?,
    )?;
    Ok(())
}

/// `sec` as an HTTP date. NGINX writes any `time_t` (after C's float-to-integer cast,
/// undefined past its range); here NaN is 0 and the time saturates to what an HTTP date
/// holds, 1970 to the end of 9999 (httpdate panics past it).
pub(crate) fn http_date(sec: f64) -> String {
    const LAST: f64 = 253_402_300_799.0; // 9999-12-31 23:59:59 UTC
    let sec = if sec.is_nan() {
        0.0
    } else {
        sec.clamp(0.0, LAST)
    };
    httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(sec as u64))
}

/// `yyyy-mm-dd hh:mm:ss` in UTC.
pub(crate) fn utc(t: SystemTime, sep: &str) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}{sep}{:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_is_nginxs() {
        assert_eq!(
            escape_uri(b"a b/c?d=e&f~!*'()", 2).unwrap(),
            b"a%20b%2Fc%3Fd%3De%26f~!*'()"
        );
        assert_eq!(escape_uri(b"/a b?c", 0).unwrap(), b"/a%20b%3Fc");
        assert_eq!(escape_uri(b"a+b c", 1).unwrap(), b"a%2Bb%20c");
        assert!(escape_uri(b"x", 7).is_err() && escape_uri(b"x", -1).is_err());
        assert_eq!(unescape_uri(b"a%20b+c%2f%zz%4"), b"a b c/%zz%4");
    }

    #[test]
    fn utc_dates() {
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        assert_eq!(utc(t, " "), "2023-11-14 22:13:20");
        assert_eq!(utc(UNIX_EPOCH, "T"), "1970-01-01T00:00:00");
    }
}
