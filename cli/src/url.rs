//! Which backend the command talks to.

use std::path::PathBuf;

use crate::UrlArg;

/// The per-user default: `sqlite://$XDG_STATE_HOME/fencelock/locks.db`, else
/// `~/.local/state/fencelock/locks.db`. Absolute, so cron jobs started from different
/// folders share it.
pub fn default_url() -> Option<String> {
    default_path().map(|p| format!("sqlite://{}", p.display()))
}

fn default_path() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .filter(|p| p.is_absolute())?;
    Some(state.join("fencelock").join("locks.db"))
}

/// Resolves the URL to use; creates the default database's folder when it is the one used.
pub fn resolve(arg: &UrlArg) -> Result<String, String> {
    if let Some(url) = &arg.url {
        return Ok(url.clone());
    }
    if let Some(url) = std::env::var("FENCELOCK_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        return Ok(url);
    }
    let path = default_path()
        .ok_or("no --url, no FENCELOCK_URL, and no HOME or XDG_STATE_HOME for the default")?;
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).map_err(|e| {
            format!(
                "cannot create the default lock folder {}: {e}",
                folder.display()
            )
        })?;
    }
    Ok(format!("sqlite://{}", path.display()))
}
