//! Which lock deployment a Locker's leases belong to, as fences see it. Apart from the fence,
//! so that leases can carry it without depending on the fence that reads it.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::url::LockerUrl;

/// Which lock deployment a Locker's leases belong to, as fences see it: the backend's own
/// identity ([`crate::backend::Backend::deployment_id`]), or a name the user gives with the
/// `deployment=NAME` URL option (for deployments reached under several names); `aliases` are
/// the identities fence records may hold from before (the derived one when a name is given,
/// and what earlier versions derived from the URL's spelling).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deployment {
    pub id: String,
    pub aliases: Vec<String>,
}

impl Deployment {
    pub(crate) fn of(backend: &dyn Backend, name: Option<&str>) -> Deployment {
        let derived = backend.deployment_id().to_string();
        let legacy = backend.legacy_deployment_ids();
        match name {
            None => Deployment {
                id: derived,
                aliases: legacy,
            },
            Some(name) => Deployment {
                id: format!("deployment:{name}"),
                aliases: std::iter::once(derived).chain(legacy).collect(),
            },
        }
    }

    /// Takes the `deployment` option out of `url` (backends do not know it) and checks it.
    pub(crate) fn take_name(url: &mut LockerUrl) -> Result<Option<String>> {
        let Some(name) = url.query.remove("deployment") else {
            return Ok(None);
        };
        let valid = !name.is_empty()
            && name.len() <= 200
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
        if !valid {
            return Err(Error::invalid(format!(
                "deployment must be 1-200 characters of A-Z a-z 0-9 . _ : -, not {name:?}"
            )));
        }
        Ok(Some(name))
    }
}
