use crate::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The test job: square a number; odd and even numbers batch apart.
#[derive(Clone, Debug)]
struct Square(u64);

impl Job for Square {
    type Output = u64;
    fn batch_key(&self) -> u64 {
        self.0 % 2
    }
    /// n µs inline; 0 stands for a job of unknown cost.
    fn inline_cost(&self) -> Option<Duration> {
        (self.0 > 0).then(|| Duration::from_micros(self.0))
    }
}

fn square(j: &Square) -> Result<u64, EngineError> {
    Ok(j.0 * j.0)
}

fn software() -> Arc<dyn Engine<Square>> {
    Arc::new(Inline::new(square))
}

/// Runs the same checks against every engine that exists (rustls runs its API tests once
/// per provider the same way).
macro_rules! conformance {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn computes_correct_results_directly_and_through_a_dispatcher() {
                let engine: Arc<dyn Engine<Square>> = $make;
                assert_eq!(engine.submit(Square(7)).unwrap().await, Ok(49));
                let d = DispatcherBuilder::new(software())
                    .engine(engine)
                    .deadline(Duration::from_secs(5))
                    .build();
                for i in 0..50 {
                    assert_eq!(d.run(Square(i)).await, Ok(i * i));
                }
                let c = &d.counters()[0];
                assert_eq!((c.submitted, c.completed, c.in_flight), (50, 50, 0));
                assert_eq!(
                    c.latency_us.counts.iter().sum::<u64>(),
                    50,
                    "one latency sample per completed job"
                );
                assert_eq!(
                    d.counters()[1].submitted,
                    0,
                    "the software engine was not needed"
                );
            }

            #[tokio::test]
            async fn an_abandoned_job_leaks_nothing() {
                let engine: Arc<dyn Engine<Square>> = $make;
                let d = Arc::new(
                    DispatcherBuilder::new(software())
                        .engine(engine)
                        .deadline(Duration::from_secs(5))
                        .build(),
                );
                // Start jobs and drop their futures at once, before or while they run.
                for i in 0..20 {
                    let d = d.clone();
                    let fut = async move { d.run(Square(i)).await };
                    drop(tokio::spawn(fut));
                }
                let mut tasks = Vec::new();
                for i in 0..20 {
                    let d = d.clone();
                    tasks.push(tokio::spawn(async move { d.run(Square(i)).await }));
                }
                for t in &tasks[..10] {
                    t.abort();
                }
                for t in tasks.drain(10..) {
                    assert!(t.await.unwrap().is_ok());
                }
                for _ in 0..500 {
                    if d.counters().iter().all(|c| c.in_flight == 0) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("jobs still counted in flight: {:?}", d.counters());
            }
        }
    };
}

conformance!(inline, Arc::new(Inline::new(square)));
conformance!(
    pool,
    Arc::new(Pool::new("test-pool", 2, 64, square).unwrap())
);

#[tokio::test]
async fn jobs_run_off_the_event_loop_are_credited_with_their_inline_cost_and_others_not() {
    let pool: Arc<dyn Engine<Square>> = Arc::new(Pool::new("pool", 1, 16, square).unwrap());
    let d = DispatcherBuilder::new(software()).engine(pool).build();
    for i in 0..=10 {
        assert_eq!(d.run(Square(i)).await, Ok(i * i));
    }
    assert_eq!(
        d.cpu_saved(),
        Duration::from_micros(55),
        "1 + 2 + ... + 10 µs"
    );
    // Only the software engine: nothing was saved, whatever the jobs cost.
    let inline = DispatcherBuilder::new(software()).build();
    assert_eq!(inline.run(Square(9)).await, Ok(81));
    assert_eq!(inline.cpu_saved(), Duration::ZERO);
}

#[tokio::test]
async fn pool_rejects_past_capacity_and_the_job_falls_back() {
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let g = gate.clone();
    let slow = move |j: &Square| {
        let (lock, cv) = &*g;
        let mut open = lock.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
        square(j)
    };
    let pool = Arc::new(Pool::new("slow-pool", 1, 1, slow).unwrap());
    let first = pool.submit(Square(3)).unwrap();
    assert_eq!(
        pool.submit(Square(4)).err(),
        Some(Reject::Busy),
        "capacity 1 is taken"
    );
    let d = DispatcherBuilder::new(software())
        .engine(pool.clone())
        .build();
    assert_eq!(
        d.run(Square(5)).await,
        Ok(25),
        "the software engine took it"
    );
    let c = d.counters();
    assert_eq!(c[0].fell_back(FallbackReason::Busy), 1);
    assert_eq!(c[1].completed, 1);
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    assert_eq!(first.await, Ok(9));
}

/// A caller that submits its next job as soon as the previous one's result arrives must
/// always find a slot: the pool frees it before it replies. (It used to free it after, and
/// `sluice speed --engine pool` saw 10-25% of such jobs fall back as `Busy`.)
#[test]
fn a_slot_is_free_again_when_its_result_arrives() {
    let pool = Pool::new("eager-pool", 1, 1, square).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        for i in 0..20_000u64 {
            let pending = pool
                .submit(Square(i))
                .unwrap_or_else(|r| panic!("job {i} rejected ({r:?}) by a pool with a free slot"));
            assert_eq!(pending.await, Ok(i * i));
        }
    });
    assert_eq!(pool.in_flight(), 0);
}

/// What the scripted engine does with the next job.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Ok,
    Fail,
    Wrong,
    Busy,
    Hang,
    /// Rejected as a job this engine never takes.
    Unsupported,
}

struct Scripted {
    script: Mutex<VecDeque<Step>>,
    then: Step,
    accepted: AtomicUsize,
    hung: Mutex<Vec<tokio::sync::oneshot::Sender<Result<u64, EngineError>>>>,
}

impl Scripted {
    fn new(script: &[Step], then: Step) -> Arc<Self> {
        Arc::new(Scripted {
            script: Mutex::new(script.iter().copied().collect()),
            then,
            accepted: AtomicUsize::new(0),
            hung: Mutex::new(Vec::new()),
        })
    }
}

impl Engine<Square> for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn submit(&self, job: Square) -> Result<Pending<u64>, Reject> {
        let step = self.script.lock().unwrap().pop_front().unwrap_or(self.then);
        if step == Step::Busy {
            return Err(Reject::Busy);
        }
        if step == Step::Unsupported {
            return Err(Reject::Unsupported);
        }
        self.accepted.fetch_add(1, Ordering::SeqCst);
        Ok(match step {
            Step::Ok => Pending::ready(square(&job)),
            Step::Fail => Pending::ready(Err(EngineError::Failed("scripted failure".into()))),
            Step::Wrong => Pending::ready(Err(EngineError::WrongResult(
                "signature does not verify".into(),
            ))),
            Step::Hang | Step::Busy | Step::Unsupported => {
                let (tx, pending) = completer();
                self.hung.lock().unwrap().push(tx);
                pending
            }
        })
    }
}

fn breaker(failures: u32) -> BreakerConfig {
    BreakerConfig {
        failures,
        backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(2),
    }
}

#[tokio::test]
async fn failures_open_the_breaker_then_a_probe_switches_traffic_back() {
    let engine = Scripted::new(&[Step::Fail, Step::Fail, Step::Fail], Step::Ok);
    let d = DispatcherBuilder::new(software())
        .engine(engine.clone())
        .breaker(breaker(3))
        .build();
    for i in 0..3 {
        assert_eq!(
            d.run(Square(i)).await,
            Ok(i * i),
            "failures fall back, the request does not fail"
        );
    }
    assert!(d.breaker_open(0));
    // While open, the engine is skipped without being asked.
    for i in 0..5 {
        assert_eq!(d.run(Square(i)).await, Ok(i * i));
    }
    assert_eq!(engine.accepted.load(Ordering::SeqCst), 3);
    assert_eq!(d.counters()[0].fell_back(FallbackReason::Down), 5);
    assert_eq!(d.counters()[0].fell_back(FallbackReason::Error), 3);
    // After the back-off one probe goes through; it succeeds and traffic switches back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(d.run(Square(6)).await, Ok(36));
    assert!(!d.breaker_open(0));
    for i in 0..4 {
        assert_eq!(d.run(Square(i)).await, Ok(i * i));
    }
    assert_eq!(engine.accepted.load(Ordering::SeqCst), 3 + 1 + 4);
    assert_eq!(d.counters()[0].completed, 5);
}

#[tokio::test]
async fn a_failed_probe_reopens_the_breaker() {
    let engine = Scripted::new(&[Step::Fail, Step::Fail], Step::Ok);
    let d = DispatcherBuilder::new(software())
        .engine(engine.clone())
        .breaker(breaker(1))
        .build();
    assert_eq!(d.run(Square(2)).await, Ok(4));
    assert!(d.breaker_open(0));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        d.run(Square(3)).await,
        Ok(9),
        "the probe fails and falls back"
    );
    assert!(d.breaker_open(0), "open again");
    assert_eq!(d.run(Square(4)).await, Ok(16));
    assert_eq!(
        engine.accepted.load(Ordering::SeqCst),
        2,
        "no job reached the engine while open"
    );
}

#[tokio::test]
async fn busy_engines_pass_the_job_down_the_chain() {
    let first = Scripted::new(&[], Step::Busy);
    let second = Scripted::new(&[], Step::Ok);
    let d = DispatcherBuilder::new(software())
        .engine(first.clone())
        .engine(second.clone())
        .build();
    assert_eq!(d.run(Square(9)).await, Ok(81));
    let c = d.counters();
    assert_eq!(c[0].fell_back(FallbackReason::Busy), 1);
    assert_eq!((c[1].completed, c[2].submitted), (1, 0));
    assert!(!d.breaker_open(0), "busy is not a failure");
}

/// A job an engine never takes is routed past it: counted and traced as routing, never as a
/// fallback (a dashboard shows fallbacks as faults).
#[tokio::test]
async fn a_job_an_engine_never_takes_is_routed_past_it_not_a_fallback() {
    let other_keys = Scripted::new(&[], Step::Unsupported);
    let d = DispatcherBuilder::new(software())
        .engine(other_keys.clone())
        .build();
    let mut t = JobTrace::default();
    assert_eq!(d.run_traced(Square(3), &mut t).await, Ok(9));
    assert_eq!(d.run(Square(4)).await, Ok(16));
    assert_eq!(t.engine, "inline");
    assert!(t.fallbacks.is_empty(), "{:?}", t.fallbacks);
    assert_eq!(t.routed_past, ["scripted"]);
    let c = d.counters();
    assert_eq!(c[0].routed_past, 2);
    assert_eq!(c[0].fell_back.iter().sum::<u64>(), 0, "{c:?}");
    assert!(!d.breaker_open(0));
}

#[tokio::test]
async fn a_traced_job_tells_which_engine_ran_it_and_what_it_fell_back_from() {
    let busy = Scripted::new(&[], Step::Busy);
    let hangs = Scripted::new(&[Step::Hang], Step::Ok);
    let d = DispatcherBuilder::new(software())
        .engine(busy.clone())
        .engine(hangs.clone())
        .deadline(Duration::from_millis(20))
        .build();
    let mut t = JobTrace::default();
    assert_eq!(d.run_traced(Square(6), &mut t).await, Ok(36));
    assert_eq!(t.engine, "inline");
    assert_eq!(
        t.fallbacks,
        [
            ("scripted".to_owned(), FallbackReason::Busy),
            ("scripted".to_owned(), FallbackReason::Deadline)
        ]
    );
    // The second time the hanging engine answers: no fallback but the busy one.
    let mut t = JobTrace::default();
    assert_eq!(d.run_traced(Square(7), &mut t).await, Ok(49));
    assert_eq!(t.engine, "scripted");
    assert_eq!(t.fallbacks, [("scripted".to_owned(), FallbackReason::Busy)]);
    assert!(t.at_engine < Duration::from_secs(1));
}

#[tokio::test]
async fn a_missed_deadline_moves_the_job_on() {
    let engine = Scripted::new(&[Step::Hang], Step::Ok);
    let d = DispatcherBuilder::new(software())
        .engine(engine.clone())
        .deadline(Duration::from_millis(20))
        .build();
    assert_eq!(d.run(Square(5)).await, Ok(25));
    let c = d.counters();
    assert_eq!(
        (
            c[0].fell_back(FallbackReason::Deadline),
            c[0].failed,
            c[0].in_flight
        ),
        (1, 1, 0)
    );
    assert_eq!(c[1].completed, 1);
    // The hung engine answering late changes nothing.
    let late = engine.hung.lock().unwrap().pop().unwrap();
    assert!(
        late.send(Ok(999)).is_err(),
        "nobody is listening for the late result"
    );
}

#[tokio::test]
async fn a_wrong_result_is_an_engine_failure_and_never_returned() {
    let engine = Scripted::new(&[Step::Wrong], Step::Ok);
    let d = DispatcherBuilder::new(software()).engine(engine).build();
    assert_eq!(d.run(Square(8)).await, Ok(64));
    assert_eq!(d.counters()[0].fell_back(FallbackReason::Error), 1);
}

type Sizes = Arc<Mutex<Vec<usize>>>;

fn queue(
    max_batch: usize,
    max_wait: Duration,
    potential: usize,
) -> (
    BatchQueue<Square>,
    Arc<EngineCounters>,
    Sizes,
    Arc<AtomicUsize>,
) {
    let counters = Arc::new(EngineCounters::new("batch"));
    let sizes: Sizes = Arc::default();
    let s = sizes.clone();
    let potential = Arc::new(AtomicUsize::new(potential));
    let q = BatchQueue::new(
        "test",
        BatchConfig {
            max_batch,
            max_wait,
        },
        potential.clone(),
        counters.clone(),
        move |jobs: Vec<Square>| {
            s.lock().unwrap().push(jobs.len());
            jobs.iter().map(square).collect()
        },
    )
    .unwrap();
    (q, counters, sizes, potential)
}

fn flushes(c: &EngineCounters, r: FlushReason) -> u64 {
    c.snapshot().flushes[FlushReason::ALL.iter().position(|x| *x == r).unwrap()]
}

#[tokio::test]
async fn a_full_batch_flushes_at_once() {
    let (q, c, sizes, _) = queue(4, Duration::from_secs(60), 100);
    let pending: Vec<_> = [2, 4, 6, 8]
        .into_iter()
        .map(|i| q.push(Square(i)))
        .collect();
    for (p, i) in pending.into_iter().zip([2u64, 4, 6, 8]) {
        assert_eq!(p.await, Ok(i * i));
    }
    assert_eq!(*sizes.lock().unwrap(), [4]);
    assert_eq!(flushes(&c, FlushReason::Full), 1);
    let h = c.snapshot().batch_size;
    assert_eq!(
        (h.counts[3], h.sum),
        (1, 4),
        "one batch of four in the histogram"
    );
}

#[tokio::test]
async fn a_lone_job_is_not_held_back_when_nobody_else_could_join() {
    let (q, c, sizes, _) = queue(8, Duration::from_secs(60), 1);
    assert_eq!(q.push(Square(3)).await, Ok(9));
    assert_eq!(*sizes.lock().unwrap(), [1]);
    assert_eq!(flushes(&c, FlushReason::AllWaiting), 1);
    assert_eq!(flushes(&c, FlushReason::Timer), 0);
}

#[tokio::test]
async fn a_partial_batch_flushes_on_the_timer() {
    let (q, c, sizes, _) = queue(8, Duration::from_millis(200), 100);
    let (a, b) = (q.push(Square(2)), q.push(Square(4)));
    assert_eq!((a.await, b.await), (Ok(4), Ok(16)));
    assert_eq!(*sizes.lock().unwrap(), [2]);
    assert_eq!(flushes(&c, FlushReason::Timer), 1);
}

#[tokio::test]
async fn different_keys_never_share_a_batch_and_abandoned_jobs_are_skipped() {
    let (q, c, sizes, _) = queue(8, Duration::from_millis(500), 100);
    let odd = q.push(Square(3));
    let even = q.push(Square(4));
    let gone = q.push(Square(6));
    drop(gone);
    assert_eq!((odd.await, even.await), (Ok(9), Ok(16)));
    let mut s = sizes.lock().unwrap().clone();
    s.sort_unstable();
    assert_eq!(
        s,
        [1, 1],
        "odd and even apart; the abandoned job was not computed"
    );
    assert_eq!(c.snapshot().flushes.iter().sum::<u64>(), 2);
}

/// Threads of this process whose name starts with `prefix` (Linux).
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end().starts_with(prefix))
        .count()
}

#[test]
fn dropping_a_pool_ends_its_threads() {
    // A reload retires engines by dropping them: their threads must go with them.
    let pool = Pool::new("retire-me", 3, 8, square).unwrap();
    // A thread names itself once it runs: wait for that (bounded), then count.
    for _ in 0..500 {
        if threads_named("retire-me-") == 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(threads_named("retire-me-"), 3);
    drop(pool);
    assert_eq!(threads_named("retire-me-"), 0, "drop joined every thread");
}
