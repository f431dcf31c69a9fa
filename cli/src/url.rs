//! Which backend the command talks to.

use std::path::{Path, PathBuf};

use crate::UrlArg;

/// The per-user default: `sqlite://$XDG_STATE_HOME/fencelock/locks.db`, else
/// `~/.local/state/fencelock/locks.db`. Absolute, so cron jobs started from different
/// folders share it.
pub fn default_url() -> Option<String> {
    default_path().map(|p| sqlite_url(&p))
}

/// The `sqlite://` URL of a file path: `%`, `?` and `#` percent-encoded, so a home folder that
/// contains them names that folder (not a decoded path, a query or a fragment).
fn sqlite_url(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut url = String::with_capacity(text.len() + 9);
    url.push_str("sqlite://");
    for c in text.chars() {
        match c {
            '%' => url.push_str("%25"),
            '?' => url.push_str("%3F"),
            '#' => url.push_str("%23"),
            c => url.push(c),
        }
    }
    url
}

fn default_path() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .filter(|p| p.is_absolute())?;
    Some(state.join("fencelock").join("locks.db"))
}

/// Resolves the URL to use: `--url`, then `FENCELOCK_URL`, then the per-user default, whose
/// folder (0700) and database file (0600) are created private to the user whatever the umask.
///
/// A `FENCELOCK_URL` that is set but empty or not UTF-8 is an error, never a silent fall back to
/// the local default: a deployment whose variable came out empty would otherwise lock a file of
/// each host's own and lose mutual exclusion without a word.
pub fn resolve(arg: &UrlArg) -> Result<String, String> {
    if let Some(url) = &arg.url {
        return Ok(url.clone());
    }
    match std::env::var("FENCELOCK_URL") {
        Ok(url) if url.trim().is_empty() => {
            return Err(
                "FENCELOCK_URL is set but empty; set it to a backend URL, or unset it \
                 to use the per-user default"
                    .to_string(),
            );
        }
        Ok(url) => return Ok(url),
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err("FENCELOCK_URL is not valid UTF-8".to_string());
        }
        Err(std::env::VarError::NotPresent) => {}
    }
    let path = default_path()
        .ok_or("no --url, no FENCELOCK_URL, and no HOME or XDG_STATE_HOME for the default")?;
    if path.to_str().is_none() {
        return Err(format!(
            "the default database path {} is not valid UTF-8; pass --url",
            path.display()
        ));
    }
    create_private(&path)?;
    Ok(sqlite_url(&path))
}

/// The default database's folder 0700 and file 0600 (SQLite gives its -wal and -shm files the
/// database file's mode). An existing folder is narrowed to 0700; a symbolic link in place of
/// the file is refused, so another local user cannot point the default somewhere else.
fn create_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let private = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot make {} private: {e}", p.display()))
    };
    if let Some(folder) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(folder)
            .map_err(|e| {
                format!(
                    "cannot create the default lock folder {}: {e}",
                    folder.display()
                )
            })?;
        private(folder, 0o700)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(format!(
            "the default lock file {} is a symbolic link; refusing to follow it",
            path.display()
        )),
        Ok(_) => private(path, 0o600),
        Err(_) => {
            // O_EXCL with O_NOFOLLOW: a link or file put there meanwhile is not opened.
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
            {
                Ok(_) => private(path, 0o600),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(format!(
                    "cannot create the default lock file {}: {e}",
                    path.display()
                )),
            }
        }
    }
}
