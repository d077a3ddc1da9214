//! `@ipMatch`: the value read as glibc's `inet_pton` reads it (libmodsecurity's
//! `tree_contains_ip`), so that exactly the addresses libmodsecurity accepts are looked up.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `value` is an address inside one of `networks`: up to its first NUL (libmodsecurity
/// passes `c_str()`), IPv6 if it has a `:`, else IPv4; anything `inet_pton` refuses (blanks,
/// a port, a zone, leading zeros in IPv4) is no match.
pub(super) fn matches(networks: &[ipnet::IpNet], value: &[u8]) -> bool {
    let value = value.split(|&b| b == 0).next().unwrap_or_default();
    let addr = if value.contains(&b':') {
        pton6(value).map(|a| IpAddr::V6(Ipv6Addr::from(a)))
    } else {
        pton4(value).map(|a| IpAddr::V4(Ipv4Addr::from(a)))
    };
    addr.is_some_and(|a| networks.iter().any(|n| n.contains(&a)))
}

/// glibc's `inet_pton4`: four decimal parts of 0-255, no leading zeros, nothing else.
pub(super) fn pton4(src: &[u8]) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut at = 0;
    let mut octets = 0;
    let mut saw_digit = false;
    for &ch in src {
        if ch.is_ascii_digit() {
            let new = u32::from(out[at]) * 10 + u32::from(ch - b'0');
            if saw_digit && out[at] == 0 {
                return None;
            }
            out[at] = u8::try_from(new).ok()?;
            if !saw_digit {
                octets += 1;
                if octets > 4 {
                    return None;
                }
                saw_digit = true;
            }
        } else if ch == b'.' && saw_digit {
            if octets == 4 {
                return None;
            }
            at += 1;
            saw_digit = false;
        } else {
            return None;
        }
    }
    (octets == 4).then_some(out)
}

/// glibc's `inet_pton6`: hex groups of up to four digits, one `::`, an IPv4 tail.
pub(super) fn pton6(src: &[u8]) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut tp = 0;
    let mut colon: Option<usize> = None;
    let mut src = src;
    match src {
        [] => return None,
        [b':', rest @ ..] => {
            if rest.first() != Some(&b':') {
                return None;
            }
            src = rest;
        }
        _ => {}
    }
    let mut token = 0;
    let mut digits = 0;
    let mut val: u32 = 0;
    let mut i = 0;
    while i < src.len() {
        let ch = src[i];
        i += 1;
        if let Some(d) = char::from(ch).to_digit(16) {
            if digits == 4 {
                return None;
            }
            val = (val << 4) | d;
            digits += 1;
            continue;
        }
        if ch == b':' {
            token = i;
            if digits == 0 {
                if colon.is_some() {
                    return None;
                }
                colon = Some(tp);
                continue;
            } else if i == src.len() || tp + 2 > 16 {
                return None;
            }
            out[tp..tp + 2].copy_from_slice(&(val as u16).to_be_bytes());
            tp += 2;
            digits = 0;
            val = 0;
            continue;
        }
        if ch == b'.' && tp + 4 <= 16 {
            let v4 = pton4(&src[token..])?;
            out[tp..tp + 4].copy_from_slice(&v4);
            tp += 4;
            digits = 0;
            break;
        }
        return None;
    }
    if digits > 0 {
        if tp + 2 > 16 {
            return None;
        }
        out[tp..tp + 2].copy_from_slice(&(val as u16).to_be_bytes());
        tp += 2;
    }
    if let Some(c) = colon {
        if tp == 16 {
            return None;
        }
        let n = tp - c;
        out.copy_within(c..tp, 16 - n);
        out[c..16 - n].fill(0);
        tp = 16;
    }
    (tp == 16).then_some(out)
}
