//! [`Controller`]'s edit operations: read, put and delete one object of the configuration,
//! with optimistic concurrency on the running revision.

use crate::controller::{Controller, Source, naming, source_text, text_hash};
use crate::edit::{self, EditError, Kind};
use crate::outcome::ReloadError;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// What a successful write did.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as it now is in the file (JSON, the TOML table's keys).
    pub object: Value,
    /// Whether it was created (201) rather than replaced (200).
    pub created: bool,
    /// The revision now serving (the new `ETag`).
    pub revision: String,
}

/// Certificate bodies may carry the PEM texts instead of paths; they are written beside the
/// configuration under `certs/` and the object gets the paths.
const CERT_PEM: &str = "cert_pem";
const KEY_PEM: &str = "key_pem";

impl Controller {
    /// The revision serving, quoted as an `ETag`.
    pub fn etag(&self) -> String {
        format!("\"{}\"", self.lock_status().revision)
    }

    /// `GET /api/v1/config`: every route, upstream, certificate and listener of the source as
    /// JSON (paths, never key material: keys stay in their files).
    pub fn config(&self) -> Result<Value, EditError> {
        let text = source_text(&self.source()).map_err(|e| EditError::new(500, e))?;
        let root: toml::Table = toml::from_str(&text)
            .map_err(|e| EditError::new(500, format!("the configuration does not parse: {e}")))?;
        serde_json::to_value(root).map_err(|e| EditError::new(500, e.to_string()))
    }

    /// `GET /api/v1/{kind}/{name}`.
    pub fn object(&self, kind: Kind, name: &str) -> Result<Value, EditError> {
        let text = source_text(&self.source()).map_err(|e| EditError::new(500, e))?;
        edit::object(&text, kind, name)
    }

    /// `PUT`: creates or replaces one object, then applies the file as a reload.
    pub async fn put(
        &self,
        kind: Kind,
        name: &str,
        mut body: Value,
        if_match: Option<&str>,
    ) -> Result<Written, EditError> {
        check_name(name)?;
        let _serial = self.serial.lock().await;
        let (target, text) = self.editable(if_match)?;
        let dir = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        // PEM in the body: written (the old files kept aside) before the check, which reads them.
        let mut restore = Vec::new();
        if kind == Kind::Certificate {
            for (field, ext, key) in [(CERT_PEM, "crt", "cert"), (KEY_PEM, "key", "key")] {
                let Some(pem) = body.get(field).cloned() else {
                    continue;
                };
                let Some(pem) = pem.as_str() else {
                    return Err(invalid(field, "must be a PEM text"));
                };
                let rel = format!("certs/{name}.{ext}");
                let path = dir.join(&rel);
                restore.push((path.clone(), std::fs::read(&path).ok()));
                write_secret(&path, pem.as_bytes(), ext == "key")
                    .map_err(|e| EditError::new(500, format!("writing {}: {e}", path.display())))?;
                if let Value::Object(m) = &mut body {
                    m.remove(field);
                    m.insert(key.to_owned(), json!(rel));
                }
            }
        }
        let result = async {
            let (new_text, created) = edit::put(&text, kind, name, &body)?;
            self.commit(&target, &text, new_text, kind, name).await?;
            Ok::<_, EditError>(created)
        }
        .await;
        match result {
            Ok(created) => Ok(Written {
                object: edit::object(&source_text(&self.source()).unwrap_or_default(), kind, name)?,
                created,
                revision: self.lock_status().revision.clone(),
            }),
            Err(e) => {
                for (path, old) in restore {
                    let _ = match old {
                        Some(bytes) => write_secret(
                            &path,
                            &bytes,
                            path.extension().is_some_and(|x| x == "key"),
                        ),
                        None => std::fs::remove_file(&path),
                    };
                }
                Err(e)
            }
        }
    }

    /// `DELETE`: removes one object; an upstream a route uses, or a certificate a listener
    /// serves, is a 409 that names them.
    pub async fn delete(
        &self,
        kind: Kind,
        name: &str,
        if_match: Option<&str>,
    ) -> Result<String, EditError> {
        let _serial = self.serial.lock().await;
        let (target, text) = self.editable(if_match)?;
        edit::object(&text, kind, name)?;
        let users = edit::users(&text, kind, name);
        if !users.is_empty() {
            return Err(EditError::new(
                409,
                format!(
                    "{} `{name}` is in use by {}; change or delete those first",
                    kind.table(),
                    users.join(", ")
                ),
            ));
        }
        let new_text = edit::delete(&text, kind, name)?;
        self.commit(&target, &text, new_text, kind, name).await?;
        Ok(self.lock_status().revision.clone())
    }

    /// The file an edit writes and its current text, after the concurrency checks.
    fn editable(&self, if_match: Option<&str>) -> Result<(PathBuf, String), EditError> {
        let source = self.source();
        let revision = self.lock_status().revision.clone();
        if let Some(m) = if_match
            && m.trim() != "*"
            && m.trim().trim_matches('"') != revision
        {
            return Err(EditError::new(
                412,
                format!(
                    "If-Match {m} is not the revision serving (\"{revision}\"); read the object again and retry"
                ),
            ));
        }
        let text = source_text(&source).map_err(|e| EditError::new(500, e))?;
        let loaded = *self.loaded_text.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.is_some_and(|h| h != text_hash(&text)) {
            return Err(EditError::new(
                412,
                "the configuration file changed on disk since it was loaded; reload it (POST /api/v1/reload) and retry",
            ));
        }
        match source {
            Source::File(path) => Ok((path, text)),
            Source::Text {
                autosave: Some(path),
                ..
            } => Ok((path, text)),
            Source::Text { autosave: None, .. } => Err(EditError::new(
                409,
                "this gateway's configuration is not in a file; run it with --config FILE to edit it through the API",
            )),
        }
    }

    /// Checks `new_text`, writes it to `target`, applies it; on a failed apply the old text
    /// goes back. The first write of the embedded default makes `target` the source.
    async fn commit(
        &self,
        target: &Path,
        old_text: &str,
        new_text: String,
        kind: Kind,
        name: &str,
    ) -> Result<(), EditError> {
        let (_, base_dir) = naming(&self.source());
        let file = target.display().to_string();
        let snapshot = match self.validate(new_text.clone(), file, base_dir).await {
            Ok(s) => s,
            Err(ReloadError::Invalid(errors)) => {
                return Err(EditError {
                    status: 422,
                    message: "the change is not valid; nothing was changed".into(),
                    errors: edit::locate(&new_text, kind, name, &errors),
                });
            }
            Err(e) => return Err(EditError::new(500, e.to_string())),
        };
        let was_file = matches!(self.source(), Source::File(_));
        write_file(target, new_text.as_bytes())
            .map_err(|e| EditError::new(500, format!("writing {}: {e}", target.display())))?;
        let result = self.apply(snapshot).await;
        self.record(&result);
        match result {
            Ok(_) => {
                *self.loaded_text.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(text_hash(&new_text));
                if !was_file {
                    tracing::info!(file = %target.display(), "the configuration is saved to this file from now on");
                    *self.source.lock().unwrap_or_else(|e| e.into_inner()) =
                        Source::File(target.to_path_buf());
                }
                Ok(())
            }
            Err(e) => {
                let _ = if was_file {
                    write_file(target, old_text.as_bytes())
                } else {
                    std::fs::remove_file(target)
                };
                Err(EditError::new(500, e.to_string()))
            }
        }
    }
}

fn invalid(path: &str, message: &str) -> EditError {
    EditError {
        status: 422,
        message: "the object is not valid; nothing was changed".into(),
        errors: vec![json!({ "path": path, "message": message, "help": "" })],
    }
}

/// Names become file names (`certs/NAME.crt`) and TOML strings: keep them plain.
/// Refuses a name an object may not have (the admin API's file edits and fleet mode's).
pub fn check_name(name: &str) -> Result<(), EditError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(EditError::new(
            400,
            format!("`{name}` is not a usable name; use letters, digits, '-', '_' and '.'"),
        ))
    }
}

/// Writes through a temporary file and a rename, keeping the old file's permissions.
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".sluice-tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)?;
    if let Ok(meta) = std::fs::metadata(path) {
        std::fs::set_permissions(&tmp, meta.permissions())?;
    }
    std::fs::rename(&tmp, path)
}

/// Writes a certificate (0644) or key (0600) file, creating its directory.
fn write_secret(path: &Path, bytes: &[u8], private: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".sluice-tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mode = if private { 0o600 } else { 0o644 };
    // Created with its final mode: a key is never readable by others, even for a moment.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    drop(f);
    std::fs::rename(&tmp, path)
}
