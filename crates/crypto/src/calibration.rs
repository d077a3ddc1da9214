//! Measures what a private-key operation costs inline on this machine, once per kind of key
//! per process (RSA-2048 signatures cost alike whatever the key), when the first local key of
//! that kind is loaded: the fastest of a few software signatures, so a preempted run does not
//! inflate it. Loading runs off the event loop. The figures live in `cost`.

use crate::cost;
use crate::job::{KeyJob, run};
use crate::key::PrivateKey;
use crate::policy::VerifyPolicy;
use sluice_offload::Job as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Signatures timed per kind of key (verified as the default `verify` policy does, as an
/// inline job would be).
const RUNS: usize = 5;

/// The job a key's kind is measured with: a signature of its first scheme.
pub(crate) fn probe_job(key: &Arc<PrivateKey>) -> Option<KeyJob> {
    let &scheme = key.schemes().first()?;
    KeyJob::sign(key.clone(), scheme, &[0x5a; 32], VerifyPolicy::Rsa)
}

/// Measures the inline cost of `job`'s kind ([`probe_job`]) unless it is known already. A
/// key that cannot sign here (a remote-only key) is left out: its jobs are then credited
/// with nothing.
pub(crate) fn calibrate(job: &KeyJob) {
    let class = job.batch_key();
    if cost::inline_cost(class).is_some() {
        return;
    }
    let Some(best) = fastest(RUNS, || run(job).is_ok()) else {
        return;
    };
    cost::record(class, best);
}

/// The fastest of `runs` timings of `work` (a preempted run must not inflate a cost);
/// `None` as soon as `work` reports a failure.
pub(crate) fn fastest(runs: usize, mut work: impl FnMut() -> bool) -> Option<Duration> {
    let mut best = None::<Duration>;
    for _ in 0..runs {
        let start = Instant::now();
        if !work() {
            return None;
        }
        let took = start.elapsed();
        best = Some(best.map_or(took, |b| b.min(took)));
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_measured_once_and_jobs_of_it_report_the_cost() {
        let pkcs8 = crate::tests::boring_key(crate::KeyKind::EcdsaP256)
            .private_key_to_der_pkcs8()
            .unwrap();
        let key = Arc::new(PrivateKey::from_pkcs8(&pkcs8).unwrap());
        let job = KeyJob::sign(key.clone(), key.schemes()[0], b"m", VerifyPolicy::Rsa).unwrap();
        assert_eq!(job.inline_cost(), None, "not measured yet");
        crate::calibrate(&key);
        let cost = job.inline_cost().expect("the key's kind was measured");
        assert!(cost > Duration::ZERO);
        let another = crate::tests::boring_key(crate::KeyKind::EcdsaP256)
            .private_key_to_der_pkcs8()
            .unwrap();
        crate::calibrate(&Arc::new(PrivateKey::from_pkcs8(&another).unwrap()));
        assert_eq!(
            job.inline_cost(),
            Some(cost),
            "one measurement per kind of key"
        );
    }
}
