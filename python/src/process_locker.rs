//! The core Locker behind a `fencelock.Locker`, with the process that connected it: a forked
//! child must neither use nor close the parent's connections. The Python class (`locker.rs`)
//! and the context managers it makes (`Lock` there, `MultiLock` in `multi.rs`) share one, so
//! that neither of those files needs the other's types.

use std::sync::Arc;

use fencelock::Locker;
use pyo3::PyResult;

use crate::error::closed;

pub(crate) struct ProcessLocker {
    /// `None` only while being dropped in a forked child.
    locker: Option<Locker>,
    pid: u32,
}

impl Drop for ProcessLocker {
    fn drop(&mut self) {
        if self.forked() {
            // Made before fork(): its connections belong to the parent. Leave them alone.
            std::mem::forget(self.locker.take());
        }
    }
}

impl ProcessLocker {
    pub(crate) fn new(locker: Locker) -> Arc<Self> {
        Arc::new(ProcessLocker {
            locker: Some(locker),
            pid: fencelock::runtime::process_id(),
        })
    }

    pub(crate) fn forked(&self) -> bool {
        self.pid != fencelock::runtime::process_id()
    }

    /// The core Locker: CLOSED in a forked child, or once closed.
    pub(crate) fn core(&self) -> PyResult<&Locker> {
        if self.forked() {
            return Err(closed(format!(
                "this Locker was connected in process {} before fork(); connect a new one in this process",
                self.pid
            )));
        }
        match &self.locker {
            Some(locker) => Ok(locker),
            None => Err(closed("the locker was closed")),
        }
    }

    /// Whether it was closed (true in a forked child, where it cannot be used).
    pub(crate) fn is_closed(&self) -> bool {
        self.forked() || self.locker.as_ref().is_none_or(|l| l.is_closed())
    }

    /// The URL, with any password redacted.
    pub(crate) fn url(&self) -> String {
        self.locker.as_ref().map(|l| l.url()).unwrap_or_default()
    }
}
