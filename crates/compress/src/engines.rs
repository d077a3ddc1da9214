//! The compression dispatcher: `pool` (dedicated threads) before `inline`.

use crate::{ChunkJob, compress_chunk};
use sluice_offload::{Dispatcher, DispatcherBuilder, Inline, Pool};
use std::sync::Arc;
use std::time::Duration;

/// A configurable compression engine (`inline`, on the caller, always ends the chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompressEngine {
    /// Dedicated threads.
    Pool,
}

/// `[offload.compress]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressConfig {
    /// Engines tried in order before `inline`.
    pub engines: Vec<CompressEngine>,
    /// Threads of the `pool` engine.
    pub pool_threads: usize,
    /// Chunks the `pool` accepts at once before answering busy.
    pub pool_capacity: usize,
    /// How long an engine may take with a chunk before it runs elsewhere.
    pub deadline: Duration,
}

impl Default for CompressConfig {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        CompressConfig {
            engines: vec![CompressEngine::Pool],
            pool_threads: threads,
            pool_capacity: 16 * threads,
            deadline: Duration::from_millis(200),
        }
    }
}

/// The dispatcher `config` describes.
pub fn build_dispatcher(config: &CompressConfig) -> std::io::Result<Dispatcher<ChunkJob>> {
    let mut b = DispatcherBuilder::new(Arc::new(Inline::new(|j: &ChunkJob| {
        compress_chunk(j, "inline")
    })))
    .deadline(config.deadline);
    for e in &config.engines {
        match e {
            CompressEngine::Pool => {
                b = b.engine(Arc::new(Pool::new(
                    "sluice-compress",
                    config.pool_threads,
                    config.pool_capacity,
                    |j: &ChunkJob| compress_chunk(j, "pool"),
                )?));
            }
        }
    }
    Ok(b.build())
}
