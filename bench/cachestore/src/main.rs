//! Which in-memory cache keeps the most of a site's hot pages under a byte bound, with
//! scans mixed in, and at what cost per lookup: moka (W-TinyLFU), TinyUFO (Pingora's
//! S3-FIFO + TinyLFU) and foyer (S3-FIFO and W-TinyLFU).
use std::sync::Arc;
use std::time::Instant;

const UNIVERSE: usize = 100_000;
const REQUESTS: usize = 2_000_000;
const SCAN_EVERY: usize = 100_000;
const SCAN_LEN: usize = 20_000;
const BOUND: u64 = 256 << 20;

fn size_of(key: u64) -> u64 {
    let mut x = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    2048 + x % (62 * 1024)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The request trace: Zipf(0.99) over UNIVERSE pages, a scan of SCAN_LEN pages seen once
/// every SCAN_EVERY requests.
fn trace(seed: u64) -> Vec<(u64, bool)> {
    let mut cdf = Vec::with_capacity(UNIVERSE);
    let mut sum = 0.0;
    for r in 1..=UNIVERSE {
        sum += 1.0 / (r as f64).powf(0.99);
        cdf.push(sum);
    }
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(REQUESTS + REQUESTS / SCAN_EVERY * SCAN_LEN);
    let mut scan_key = 1_000_000_000u64 + seed * 100_000_000;
    for i in 0..REQUESTS {
        if i % SCAN_EVERY == SCAN_EVERY - 1 {
            for _ in 0..SCAN_LEN {
                scan_key += 1;
                out.push((scan_key, true));
            }
        }
        let u = (rng.next() % 1_000_000_007) as f64 / 1_000_000_007.0 * sum;
        let rank = cdf.partition_point(|c| *c < u);
        // Ranks shuffled over keys, so hot keys are not the small ones.
        out.push(((rank as u64).wrapping_mul(2_654_435_761) % 1_000_000_007, false));
    }
    out
}

trait Store: Send + Sync {
    fn get(&self, k: u64) -> bool;
    fn put(&self, k: u64, bytes: u64);
}

struct Moka(moka::sync::Cache<u64, Arc<u64>>);
impl Store for Moka {
    fn get(&self, k: u64) -> bool {
        self.0.get(&k).is_some()
    }
    fn put(&self, k: u64, bytes: u64) {
        self.0.insert(k, Arc::new(bytes));
    }
}

struct Ufo(tinyufo::TinyUfo<u64, Arc<u64>>);
impl Store for Ufo {
    fn get(&self, k: u64) -> bool {
        self.0.get(&k).is_some()
    }
    fn put(&self, k: u64, bytes: u64) {
        // TinyUFO weighs in u16: KiB here.
        self.0.put(k, Arc::new(bytes), bytes.div_ceil(1024) as u16);
    }
}

struct Foyer(foyer_memory::Cache<u64, Arc<u64>>);
impl Store for Foyer {
    fn get(&self, k: u64) -> bool {
        self.0.get(&k).is_some()
    }
    fn put(&self, k: u64, bytes: u64) {
        self.0.insert(k, Arc::new(bytes));
    }
}

fn run(name: &str, store: Arc<dyn Store>, threads: usize) {
    let traces: Vec<Vec<(u64, bool)>> = (0..threads as u64).map(|t| trace(0x1234_5678 + t)).collect();
    let start = Instant::now();
    let handles: Vec<_> = traces
        .into_iter()
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let (mut hits, mut asked, mut hit_bytes, mut asked_bytes, mut ops) = (0u64, 0u64, 0u64, 0u64, 0u64);
                for (k, scan) in t {
                    let bytes = size_of(k);
                    let hit = store.get(k);
                    if !hit {
                        store.put(k, bytes);
                    }
                    ops += 1;
                    if !scan {
                        asked += 1;
                        asked_bytes += bytes;
                        if hit {
                            hits += 1;
                            hit_bytes += bytes;
                        }
                    }
                }
                (hits, asked, hit_bytes, asked_bytes, ops)
            })
        })
        .collect();
    let mut tot = (0u64, 0u64, 0u64, 0u64, 0u64);
    for h in handles {
        let r = h.join().unwrap();
        tot = (tot.0 + r.0, tot.1 + r.1, tot.2 + r.2, tot.3 + r.3, tot.4 + r.4);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "| {name} | {threads} | {:.1}% | {:.1}% | {:.2} M |",
        100.0 * tot.0 as f64 / tot.1 as f64,
        100.0 * tot.2 as f64 / tot.3 as f64,
        tot.4 as f64 / secs / 1e6
    );
}

fn main() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned()))
        .unwrap_or_default();
    println!("CPU: {cpu}; {UNIVERSE} pages of 2-64 KiB, Zipf 0.99, {REQUESTS} requests per thread with a {SCAN_LEN}-page scan every {SCAN_EVERY}; bound {} MiB", BOUND >> 20);
    println!("| cache | threads | hit ratio (pages asked again) | byte hit ratio | lookups+inserts/s |");
    println!("|---|---|---|---|---|");
    for threads in [1, 2] {
        let moka = moka::sync::Cache::builder()
            .max_capacity(BOUND)
            .weigher(|_k: &u64, v: &Arc<u64>| u32::try_from(**v).unwrap_or(u32::MAX))
            .build();
        run("moka 0.12 (W-TinyLFU)", Arc::new(Moka(moka)), threads);
        run("TinyUFO 0.9 (S3-FIFO + TinyLFU)", Arc::new(Ufo(tinyufo::TinyUfo::new((BOUND >> 10) as usize, 20_000))), threads);
        for (label, eviction) in [
            ("foyer-memory 0.22 (S3-FIFO)", foyer_memory::EvictionConfig::S3Fifo(Default::default())),
            ("foyer-memory 0.22 (W-TinyLFU)", foyer_memory::EvictionConfig::Lfu(Default::default())),
        ] {
            let c: foyer_memory::Cache<u64, Arc<u64>> = foyer_memory::CacheBuilder::new(BOUND as usize)
                .with_weighter(|_k: &u64, v: &Arc<u64>| **v as usize)
                .with_eviction_config(eviction)
                .build();
            run(label, Arc::new(Foyer(c)), threads);
        }
    }
}
