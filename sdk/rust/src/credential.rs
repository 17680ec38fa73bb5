//! Where a connector keeps its machine's credential (SPEC L8): in memory,
//! or in a private file that each renewal replaces atomically.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::{debug, warn};

use crate::ConnectError;

/// The machine's current credential, shared by a connector's clones and
/// the links they open.
#[derive(Clone)]
pub(super) enum Keeper {
    /// The newest credential, in memory.
    Memory(Arc<Mutex<String>>),
    /// A file holding the newest credential; read at each connect.
    File(PathBuf),
}

impl fmt::Debug for Keeper {
    /// Never shows the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Keeper::Memory(_) => f.write_str("Memory(…)"),
            Keeper::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

impl Keeper {
    pub(super) fn memory(credential: String) -> Self {
        Keeper::Memory(Arc::new(Mutex::new(credential)))
    }

    /// The credential to connect with now.
    pub(super) fn current(&self) -> Result<String, ConnectError> {
        match self {
            Keeper::Memory(held) => Ok(held.lock().unwrap_or_else(PoisonError::into_inner).clone()),
            Keeper::File(path) => read_credential_file(path),
        }
    }

    /// Keeps `credential` as the newest. A file is replaced atomically and
    /// stays private; when it cannot be written the file keeps the previous
    /// credential (still valid until its own expiry) and the failure is
    /// logged.
    pub(super) async fn replace(&self, credential: String) {
        match self {
            Keeper::Memory(held) => {
                *held.lock().unwrap_or_else(PoisonError::into_inner) = credential;
            }
            Keeper::File(path) => {
                let target = path.clone();
                let written = tokio::task::spawn_blocking(move || {
                    write_credential_file(&target, &credential)
                })
                .await;
                match written {
                    Ok(Ok(())) => debug!(path = %path.display(), "renewed credential saved"),
                    Ok(Err(error)) => warn!(
                        path = %path.display(), %error,
                        "cannot save the renewed credential; the file keeps the previous one until it expires"
                    ),
                    Err(error) => warn!(%error, "saving the renewed credential failed"),
                }
            }
        }
    }
}

/// Reads a credential file: its content, trimmed.
pub(super) fn read_credential_file(path: &Path) -> Result<String, ConnectError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConnectError::CredentialFile {
        path: path.to_owned(),
        source,
    })?;
    let credential = text.trim();
    if credential.is_empty() {
        return Err(ConnectError::EmptyCredentialFile {
            path: path.to_owned(),
        });
    }
    warn_if_shared(path);
    Ok(credential.to_owned())
}

#[cfg(unix)]
fn warn_if_shared(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            warn!(
                path = %path.display(),
                "the credential file is readable by others; it becomes private (0600) at the first renewal"
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_shared(_path: &Path) {}

/// Writes `credential` to `path` atomically and privately: a temporary file
/// in the same folder, created with mode 0600, is written, flushed to disk
/// and renamed over `path`, so `path` always holds a whole credential and
/// is never readable by others. The folder is synced too, so the rename
/// survives a crash.
pub fn write_credential_file(path: &Path, credential: &str) -> std::io::Result<()> {
    write_private_file(path, credential)
}

/// Writes `contents` to `path` as [`write_credential_file`] does: whole,
/// private and durable.
pub(crate) fn write_private_file(path: &Path, contents: &str) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a private file's path names a file",
        )
    })?;
    let temp = dir.join(format!(
        ".{}.{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = write_private(&temp, contents).and_then(|()| std::fs::rename(&temp, path));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(error);
    }
    sync_dir(&dir);
    Ok(())
}

/// Creates `path` (it must not exist) readable by its owner only, and
/// writes `credential` and a newline to disk.
fn write_private(path: &Path, credential: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    #[cfg(unix)]
    {
        // The mode above is masked by the umask; say exactly what we mean.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(credential.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// Makes a rename in `dir` durable.
#[cfg(unix)]
fn sync_dir(dir: &Path) {
    if let Err(error) = std::fs::File::open(dir).and_then(|d| d.sync_all()) {
        debug!(%error, dir = %dir.display(), "cannot sync the credential file's folder");
    }
}

/// Folders cannot be synced here; the rename is as durable as the platform
/// makes it.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) {}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_written_credential_file_is_private_whole_and_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("margin-credential-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("machine.credential");
        std::fs::write(&path, "mgm_old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();

        write_credential_file(&path, "mgm_new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "mgm_new\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("machine.credential")]);
        assert_eq!(read_credential_file(&path).unwrap(), "mgm_new");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_or_blank_file_is_a_clear_error() {
        let missing = Path::new("/nonexistent/margin/machine.credential");
        assert!(matches!(
            read_credential_file(missing),
            Err(ConnectError::CredentialFile { .. })
        ));
        let dir = std::env::temp_dir().join(format!("margin-blank-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let blank = dir.join("blank");
        std::fs::write(&blank, " \n").unwrap();
        assert!(matches!(
            read_credential_file(&blank),
            Err(ConnectError::EmptyCredentialFile { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_debug_form_never_shows_the_secret() {
        let shown = format!("{:?}", Keeper::memory("mgm_secret".into()));
        assert!(!shown.contains("mgm_secret"), "{shown}");
    }
}
