use crate::{Engine, EngineError, Job, Pending, Reject};

/// Runs jobs on the caller's thread: the baseline (what plain NGINX does) and the software
/// engine at the end of every chain. Never rejects.
pub struct Inline<F> {
    work: F,
}

impl<F> std::fmt::Debug for Inline<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Inline")
    }
}

impl<F> Inline<F> {
    /// An engine that computes with `work`.
    pub fn new(work: F) -> Self {
        Inline { work }
    }
}

impl<J, F> Engine<J> for Inline<F>
where
    J: Job,
    F: Fn(&J) -> Result<J::Output, EngineError> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        "inline"
    }

    fn submit(&self, job: J) -> Result<Pending<J::Output>, Reject> {
        Ok(Pending::ready((self.work)(&job)))
    }
}
