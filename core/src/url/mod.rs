//! fencelock's own URL parser.
//!
//! The multi-host forms (`redis+cluster://h1:p1,h2:p2`, `zk://h1,h2/chroot`) do not parse with
//! a generic URL parser, so the core parses every backend URL here. A parsed URL never prints
//! its password: `Display` and `Debug` both show the redacted form.
//!
//! This file holds the [`LockerUrl`] type; the rest is by concern:
//! - `kind`: the backend kinds and the schemes that select them;
//! - `parse`: [`LockerUrl::parse`], the URL text into its parts;
//! - `host`: one `host:port` of a host list;
//! - `query`: the query options, read as durations or flags, unknown ones refused;
//! - `percent`: percent-escapes, decoded and encoded;
//! - `redact`: what of a URL a message may show, and the redaction of secrets in free text;
//! - `redlock`: a `redlock://` URL made from single-Redis URLs.

use std::collections::BTreeMap;
use std::path::PathBuf;

mod host;
mod kind;
mod parse;
mod percent;
mod query;
mod redact;
mod redlock;

pub use host::HostPort;
pub use kind::BackendKind;
pub use redact::redact_secrets;

/// A parsed backend URL. The password is kept private and never formatted.
#[derive(Clone, PartialEq, Eq)]
pub struct LockerUrl {
    pub kind: BackendKind,
    /// The scheme as written, lowercased (`rediss`, `postgresql`, …).
    pub scheme: String,
    pub tls: bool,
    pub user: Option<String>,
    password: Option<String>,
    pub hosts: Vec<HostPort>,
    /// The path after the hosts, without its leading `/` (db index, chroot, database name);
    /// for SQLite, the file path.
    pub path: String,
    pub query: BTreeMap<String, String>,
}

impl LockerUrl {
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The SQLite file path (`None` for other backends).
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        (self.kind == BackendKind::Sqlite).then(|| PathBuf::from(&self.path))
    }
}
