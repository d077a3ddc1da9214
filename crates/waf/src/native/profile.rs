//! Where a native inspection's time goes, by rule and by transformation: the issue's "profile
//! by rule and by transformation", which a function profile (callgrind) cannot give, since
//! every rule runs through the same functions. Built with the `profile` feature only; without
//! it [`rule`] and [`transform`] are the calls they wrap and cost nothing.
//! `PROFILE=1 cargo run --profile quick -p sluice-waf --features profile --example engines`
//! prints the table (docs/waf.md, "What it costs").
//!
//! A rule's time is its whole evaluation, its chain's rules included; the work the engine
//! does once per request and keeps (a value transformed through a chain, a prefilter's scan,
//! a target's union) is charged to the first rule that asks for it. A transformation's time
//! is its own run, wherever it happens (within a rule's time too).

use std::cell::RefCell;
#[cfg(feature = "profile")]
use std::time::Instant;

/// The time and calls of one rule (by its index in the rule set) or transformation,
/// summed on this thread since the last [`take`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Nanoseconds, summed.
    pub nanos: u64,
    /// How many times it ran.
    pub calls: u64,
}

/// What [`take`] hands over.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    /// By the rule's index in the rule set (`RuleSet::rules`); a rule never run is absent.
    pub rules: Vec<(usize, Cost)>,
    /// By transformation, named as rules write it.
    pub transforms: Vec<(&'static str, Cost)>,
}

thread_local! {
    static RULES: RefCell<Vec<Cost>> = const { RefCell::new(Vec::new()) };
    static TRANSFORMS: RefCell<Vec<(&'static str, Cost)>> = const { RefCell::new(Vec::new()) };
}

/// Runs rule `index`'s evaluation, its time counted.
#[inline(always)]
pub(super) fn rule<R>(index: usize, f: impl FnOnce() -> R) -> R {
    #[cfg(feature = "profile")]
    {
        let started = Instant::now();
        let r = f();
        count_rule(index, elapsed(started));
        r
    }
    #[cfg(not(feature = "profile"))]
    {
        let _ = index;
        f()
    }
}

/// Runs a transformation, its time counted under the name `name` gives (asked only with the
/// feature: the name is found by a search).
#[inline(always)]
pub(super) fn transform<R>(name: impl FnOnce() -> &'static str, f: impl FnOnce() -> R) -> R {
    #[cfg(feature = "profile")]
    {
        let started = Instant::now();
        let r = f();
        count_transform(name(), elapsed(started));
        r
    }
    #[cfg(not(feature = "profile"))]
    {
        let _ = name;
        f()
    }
}

/// One run of rule `index` that took `nanos`. (Built without the feature too, so that
/// its test runs in every `cargo test`.)
#[cfg_attr(not(feature = "profile"), allow(dead_code))]
fn count_rule(index: usize, nanos: u64) {
    RULES.with_borrow_mut(|rules| {
        if rules.len() <= index {
            rules.resize(index + 1, Cost::default());
        }
        rules[index].nanos += nanos;
        rules[index].calls += 1;
    });
}

/// One run of transformation `step` that took `nanos`.
#[cfg_attr(not(feature = "profile"), allow(dead_code))]
fn count_transform(step: &'static str, nanos: u64) {
    TRANSFORMS.with_borrow_mut(|all| {
        let at = match all.iter().position(|(t, _)| *t == step) {
            Some(at) => at,
            None => {
                all.push((step, Cost::default()));
                all.len() - 1
            }
        };
        all[at].1.nanos += nanos;
        all[at].1.calls += 1;
    });
}

/// What this thread counted since the last call, and counting starts again from nothing.
/// Empty without the `profile` feature (nothing counts).
pub fn take() -> Profile {
    let rules = RULES.with_borrow_mut(std::mem::take);
    Profile {
        rules: rules
            .into_iter()
            .enumerate()
            .filter(|(_, c)| c.calls > 0)
            .collect(),
        transforms: TRANSFORMS.with_borrow_mut(std::mem::take),
    }
}

#[cfg(feature = "profile")]
fn elapsed(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_and_step_is_counted_apart_and_take_starts_again() {
        let _ = take();
        count_rule(3, 5);
        count_rule(3, 7);
        count_rule(1, 2_000);
        count_transform("lowercase", 11);
        count_transform("trim", 1);
        count_transform("lowercase", 4);
        let p = take();
        let rules: Vec<(usize, Cost)> = p.rules.clone();
        let cost = |nanos, calls| Cost { nanos, calls };
        assert_eq!(rules, vec![(1, cost(2_000, 1)), (3, cost(12, 2))]);
        assert_eq!(
            p.transforms,
            vec![("lowercase", cost(15, 2)), ("trim", cost(1, 1))]
        );
        let again = take();
        assert!(again.rules.is_empty() && again.transforms.is_empty());
    }

    /// With the feature, the wrappers time what they run; without it they only run it.
    #[test]
    fn the_wrappers_count_only_with_the_feature() {
        let _ = take();
        assert_eq!(rule(2, || 7), 7);
        let named = std::cell::Cell::new(false);
        let out = transform(
            || {
                named.set(true);
                "lowercase"
            },
            || 8,
        );
        assert_eq!(out, 8);
        let p = take();
        if cfg!(feature = "profile") {
            assert_eq!(p.rules.len(), 1);
            assert_eq!(p.rules[0].0, 2);
            assert_eq!(p.transforms.len(), 1);
            assert_eq!(
                (p.transforms[0].0, p.transforms[0].1.calls),
                ("lowercase", 1)
            );
            assert!(named.get());
        } else {
            assert!(p.rules.is_empty() && p.transforms.is_empty(), "{p:?}");
            assert!(!named.get(), "the name is not even looked up");
        }
    }
}
