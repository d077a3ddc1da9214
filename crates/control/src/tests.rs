use super::*;
use sluice_config::{CertCache, Snapshot};
use std::sync::{Arc, Mutex};

/// Records what it was asked to apply; refuses when told to.
#[derive(Default)]
struct Recorder {
    applied: Mutex<Vec<String>>,
    refuse: Mutex<Option<String>>,
}

impl Target for Recorder {
    fn apply(&self, snapshot: Arc<Snapshot>) -> TargetFuture<'_> {
        Box::pin(async move {
            if let Some(why) = self.refuse.lock().unwrap().clone() {
                return Err(why);
            }
            self.applied.lock().unwrap().push(snapshot.revision.clone());
            Ok(format!("{} route(s)", snapshot.routes.len()))
        })
    }
}

const GOOD: &str = r#"
[[listener]]
name = "http"
address = "127.0.0.1:0"

[[upstream]]
name = "app"
servers = [{ address = "127.0.0.1:9" }]

[[route]]
name = "all"
upstream = "app"
"#;

fn setup(
    text: &str,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    Arc<Recorder>,
    Controller,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    std::fs::write(&path, text).unwrap();
    let source = Source::File(path.clone());
    let certs = Arc::new(CertCache::new());
    let first = Controller::load(&source, &certs).unwrap();
    let target = Arc::new(Recorder::default());
    let c = Controller::new(source, target.clone(), certs, &first);
    (dir, path, target, c)
}

#[tokio::test]
async fn a_broken_file_is_not_applied_and_is_reported_at_its_lines() {
    let (_dir, path, target, c) = setup(GOOD);
    let before = c.status().revision;
    std::fs::write(
        &path,
        GOOD.replace("upstream = \"app\"", "upstream = \"nope\"")
            .replace("name = \"http\"", "name = \"http\"\nbind = 1"),
    )
    .unwrap();
    let err = c.reload().await.unwrap_err();
    let lines: Vec<usize> = err.errors().iter().map(|e| e.line).collect();
    assert_eq!(lines, vec![4, 13], "{err:?}");
    assert!(target.applied.lock().unwrap().is_empty());
    let status = c.status();
    assert_eq!(status.revision, before);
    assert_eq!((status.reloads_ok, status.reloads_failed), (0, 1));
    assert!(status.last_failure.is_some());
}

#[tokio::test]
async fn a_good_change_is_applied_with_a_new_revision() {
    let (_dir, path, target, c) = setup(GOOD);
    let before = c.status().revision;
    std::fs::write(&path, GOOD.replace("127.0.0.1:9", "127.0.0.1:10")).unwrap();
    let outcome = c.reload().await.unwrap();
    assert_eq!(outcome.previous, before);
    assert_ne!(outcome.revision, before);
    assert_eq!(
        *target.applied.lock().unwrap(),
        vec![outcome.revision.clone()]
    );
    assert_eq!(c.status().revision, outcome.revision);
}

#[tokio::test]
async fn a_refused_apply_keeps_the_old_revision() {
    let (_dir, path, target, c) = setup(GOOD);
    let before = c.status().revision;
    *target.refuse.lock().unwrap() = Some("listener `http` cannot bind".into());
    std::fs::write(&path, GOOD.replace("127.0.0.1:9", "127.0.0.1:10")).unwrap();
    let err = c.reload().await.unwrap_err();
    assert!(matches!(err, ReloadError::Apply(ref m) if m.contains("cannot bind")));
    assert_eq!(c.status().revision, before);
}

#[tokio::test]
async fn a_missing_file_is_a_read_error() {
    let (_dir, path, _target, c) = setup(GOOD);
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(c.reload().await, Err(ReloadError::Read(_))));
}
