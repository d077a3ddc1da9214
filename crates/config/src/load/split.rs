//! `[[route.split]]`: traffic split for gray releases, by weight (stable per user when
//! `split_on` names a cookie or header), by match on headers, cookies or query arguments,
//! or both.

use super::Cx;
use crate::hash_key::HashKey;
use crate::raw::*;
use crate::snapshot::*;
use std::collections::{BTreeMap, HashMap};
use toml::Spanned;

impl Cx<'_> {
    /// `[[route.split]]` and `split_on`: the route's traffic splits, and what keeps a user on
    /// their side of a weighted one. A split naming no defined upstream is reported and left
    /// out.
    pub(super) fn split(
        &mut self,
        raw: &RawRoute,
        upstream_names: &HashMap<String, usize>,
        is_broken: &dyn Fn(&str, &str) -> bool,
    ) -> (Vec<Split>, HashKey) {
        let route = raw.name.get_ref();
        let split_on = self.split_on(raw);
        let mut out = Vec::new();
        let mut weighted_total = 0u32;
        for s in raw.split.iter().flatten() {
            let r = s.get_ref();
            let upstream = upstream_names.get(r.upstream.get_ref()).copied();
            if upstream.is_none() && !is_broken("upstream", r.upstream.get_ref()) {
                self.err_at(
                    &r.upstream,
                    format!(
                        "route `{route}` splits to upstream `{}`, which is not defined",
                        r.upstream.get_ref()
                    ),
                    "fix the name or add an [[upstream]] with it",
                );
            }
            let basis_points = self.split_weight(route, r);
            if r.header.is_none() && r.cookie.is_none() && r.query.is_none() {
                weighted_total += basis_points;
            }
            let headers = self.header_match(route, "split", r.header.as_ref());
            if let Some(u) = upstream {
                out.push(Split {
                    upstream: u,
                    basis_points,
                    headers,
                    cookies: pairs(&r.cookie),
                    query: pairs(&r.query),
                });
            }
        }
        if weighted_total > 10_000
            && let Some(last) = raw.split.iter().flatten().last()
        {
            self.err_at(
                last,
                format!(
                    "route `{route}`: weighted splits add up to {}%, more than all of the traffic",
                    f64::from(weighted_total) / 100.0
                ),
                "make the weights of splits without a match add up to 100 or less; the rest goes to the route's upstream",
            );
        }
        (out, split_on)
    }

    /// `split_on` (default the client's address): what a weighted split hashes, so that a
    /// user stays on one side.
    fn split_on(&mut self, raw: &RawRoute) -> HashKey {
        let Some(v) = &raw.split_on else {
            return HashKey::Client;
        };
        match super::upstream::hash_key(v.get_ref()) {
            Some(HashKey::Uri) | None => {
                self.err_at(
                    v,
                    format!(
                        "route `{}`: split_on = \"{}\" is not a split key",
                        raw.name.get_ref(),
                        v.get_ref()
                    ),
                    "use \"cookie:NAME\" or \"header:NAME\" (a user keeps their side), \"query:NAME\" or \"client\"",
                );
                HashKey::Client
            }
            Some(k) => k,
        }
    }

    /// A split's `weight` in basis points (all of the traffic by default); a split without a
    /// match needs one, or it would take everything.
    fn split_weight(&mut self, route: &str, r: &RawSplit) -> u32 {
        let basis_points = match &r.weight {
            None => 10_000,
            Some(w) if *w.get_ref() > 0.0 && *w.get_ref() <= 100.0 => {
                (w.get_ref() * 100.0).round() as u32
            }
            Some(w) => {
                self.err_at(
                    w,
                    format!(
                        "route `{route}`: split weight {} is not a percentage above 0",
                        w.get_ref()
                    ),
                    "use a percentage such as 5 (or 0.5), at most 100",
                );
                0
            }
        };
        let matches = r.header.is_some() || r.cookie.is_some() || r.query.is_some();
        if !matches && r.weight.is_none() {
            self.err_at(
                &r.upstream,
                format!("route `{route}`: a split to `{}` with neither weight nor match takes everything", r.upstream.get_ref()),
                "add weight = 5 (percent), or header/cookie/query to match; or make it the route's upstream",
            );
        }
        basis_points
    }
}

/// A split's `cookie` or `query` matches, as name and value.
fn pairs(m: &Option<BTreeMap<String, Spanned<String>>>) -> Vec<(String, String)> {
    m.iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.get_ref().clone()))
        .collect()
}
