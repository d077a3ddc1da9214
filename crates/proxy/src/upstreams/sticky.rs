//! Sticky sessions: the gateway names the server it chose in a cookie, and later requests
//! carrying the cookie go back to that server while it is up.
//!
//! The cookie is `<server id>.<tag>`: the id is the stable hash of the server's configured
//! address (so a cookie outlives reloads and reorderings of the server list), the tag an
//! HMAC-SHA256 over the upstream's name and the id, cut to 64 bits, so a client cannot send
//! itself to a server of its choosing (a forged or stale cookie is ignored and replaced).
//! The key is `key_file`'s (shared by a fleet) or one drawn at random once per process.

use crate::hash::hash64;
use sluice_config::Sticky;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// A group's sticky-session state.
#[derive(Debug)]
pub(crate) struct StickyCookies {
    config: Sticky,
    key: Arc<[u8]>,
    upstream: String,
    /// Server id → index in the group.
    by_id: HashMap<u64, usize>,
    /// The `Set-Cookie` value per server, made once.
    set_cookie: Vec<http::HeaderValue>,
}

/// The process's random key, for groups without `key_file`: the same for every reload.
fn process_key() -> Arc<[u8]> {
    static KEY: OnceLock<Arc<[u8]>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        boring::rand::rand_bytes(&mut key).expect("BoringSSL's random generator does not fail");
        Arc::from(&key[..])
    })
    .clone()
}

impl StickyCookies {
    /// `names`: the servers' configured addresses, in group order. `secure`: whether the
    /// cookie may only travel over HTTPS is decided per response (see [`Self::set_cookie`]).
    pub(crate) fn new(config: Sticky, upstream: &str, names: &[&str]) -> Self {
        let key = config.key.as_deref().map_or_else(process_key, Arc::from);
        let ids: Vec<u64> = names
            .iter()
            .map(|n| hash64(0x7374_6963, n.as_bytes()))
            .collect();
        let mut this = StickyCookies {
            by_id: ids.iter().enumerate().map(|(i, &id)| (id, i)).collect(),
            set_cookie: Vec::new(),
            key,
            upstream: upstream.to_string(),
            config,
        };
        this.set_cookie = ids
            .iter()
            .map(|&id| {
                let mut v = format!(
                    "{}={}; Path=/; HttpOnly; SameSite=Lax",
                    this.config.cookie,
                    this.value(id)
                );
                if let Some(age) = this.config.max_age {
                    v.push_str(&format!("; Max-Age={}", age.as_secs()));
                }
                http::HeaderValue::from_str(&v).expect("cookie names and values are checked ASCII")
            })
            .collect();
        this
    }

    fn tag(&self, id: u64) -> u64 {
        let mut data = Vec::with_capacity(self.upstream.len() + 9);
        data.extend_from_slice(self.upstream.as_bytes());
        data.push(0);
        data.extend_from_slice(&id.to_be_bytes());
        let mac = boring::hash::hmac_sha256(&self.key, &data).expect("HMAC-SHA256 does not fail");
        u64::from_be_bytes(mac[..8].try_into().expect("8 bytes"))
    }

    fn value(&self, id: u64) -> String {
        format!("{id:016x}.{:016x}", self.tag(id))
    }

    /// The server a request's cookie names, if the cookie is ours, intact and names a server
    /// of this group.
    pub(crate) fn server(&self, headers: &http::HeaderMap) -> Option<usize> {
        let value = crate::upstreams::request_key::cookie(headers, &self.config.cookie)?;
        let value = std::str::from_utf8(value).ok()?;
        let (id, tag) = value.split_once('.')?;
        if id.len() != 16 || tag.len() != 16 {
            return None;
        }
        let id = u64::from_str_radix(id, 16).ok()?;
        let tag = u64::from_str_radix(tag, 16).ok()?;
        let index = *self.by_id.get(&id)?;
        boring::memcmp::eq(&self.tag(id).to_be_bytes(), &tag.to_be_bytes()).then_some(index)
    }

    /// The `Set-Cookie` header naming server `index`; `Secure` on HTTPS listeners.
    pub(crate) fn set_cookie(&self, index: usize, https: bool) -> http::HeaderValue {
        let v = &self.set_cookie[index];
        if !https {
            return v.clone();
        }
        let mut bytes = v.as_bytes().to_vec();
        bytes.extend_from_slice(b"; Secure");
        http::HeaderValue::from_bytes(&bytes).expect("ASCII stays ASCII")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cookies(key: Option<&[u8]>) -> StickyCookies {
        let config = Sticky {
            cookie: "srv".into(),
            max_age: Some(Duration::from_secs(3600)),
            key: key.map(<[u8]>::to_vec),
        };
        StickyCookies::new(
            config,
            "app",
            &["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"],
        )
    }

    fn request_with(cookie: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::COOKIE, cookie.parse().unwrap());
        h
    }

    /// `srv=<value>` out of a Set-Cookie header.
    fn pair(set: &http::HeaderValue) -> String {
        set.to_str().unwrap().split(';').next().unwrap().to_string()
    }

    #[test]
    fn a_cookie_the_gateway_set_leads_back_to_its_server() {
        let c = cookies(None);
        for i in 0..3 {
            let set = c.set_cookie(i, false);
            assert!(set.to_str().unwrap().ends_with("; Max-Age=3600"), "{set:?}");
            assert_eq!(
                c.server(&request_with(&format!("a=1; {}", pair(&set)))),
                Some(i)
            );
        }
        assert!(
            c.set_cookie(0, true)
                .to_str()
                .unwrap()
                .ends_with("; Secure")
        );
    }

    #[test]
    fn forged_or_foreign_cookies_are_ignored() {
        let c = cookies(Some(&[7u8; 32]));
        let good = pair(&c.set_cookie(1, false));
        let value = good.strip_prefix("srv=").unwrap();
        let (id, tag) = value.split_once('.').unwrap();
        // Another server's id with server 1's tag.
        let other_id = pair(&c.set_cookie(2, false));
        let other_id = other_id
            .strip_prefix("srv=")
            .unwrap()
            .split_once('.')
            .unwrap()
            .0;
        assert_eq!(
            c.server(&request_with(&format!("srv={other_id}.{tag}"))),
            None
        );
        // A flipped bit in the tag.
        let flipped = format!("{:016x}", u64::from_str_radix(tag, 16).unwrap() ^ 1);
        assert_eq!(
            c.server(&request_with(&format!("srv={id}.{flipped}"))),
            None
        );
        assert_eq!(c.server(&request_with("srv=garbage")), None);
        assert_eq!(c.server(&request_with("other=1")), None);
        // The same key elsewhere (another gateway of the fleet) honours it; another key not.
        assert_eq!(
            cookies(Some(&[7u8; 32])).server(&request_with(&good)),
            Some(1)
        );
        assert_eq!(cookies(Some(&[8u8; 32])).server(&request_with(&good)), None);
    }
}
