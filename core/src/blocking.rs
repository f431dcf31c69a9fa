//! The blocking form of the API, for bindings and programs without an async runtime of
//! their own. Each call runs its future to completion on the Locker's runtime.

use std::future::Future;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::error::{Error, Result};
use crate::fence::{Fence, FenceToken, Statement};
use crate::lease::Lease;
use crate::locker::Locker;
use crate::options::LockOptions;

/// Runs `fut` on `runtime`, blocking this thread. Called from a thread of an async runtime
/// it would deadlock or panic, so it refuses with INTERNAL instead.
pub fn block_on<T>(runtime: &Handle, fut: impl Future<Output = Result<T>>) -> Result<T> {
    if Handle::try_current().is_ok() {
        return Err(Error::internal(
            "a blocking fencelock call was made from inside an async runtime; use the async API there",
        ));
    }
    runtime.block_on(fut)
}

impl Locker {
    pub fn acquire_blocking(&self, name: &str, options: &LockOptions) -> Result<Lease> {
        block_on(self.runtime(), self.acquire(name, options))
    }

    pub fn try_acquire_blocking(&self, name: &str, options: &LockOptions) -> Result<Option<Lease>> {
        block_on(self.runtime(), self.try_acquire(name, options))
    }

    pub fn close_blocking(&self) -> Result<()> {
        block_on(self.runtime(), async {
            self.close().await;
            Ok(())
        })
    }
}

impl Lease {
    pub fn release_blocking(&self, runtime: &Handle) -> Result<()> {
        block_on(runtime, self.release())
    }

    pub fn extend_blocking(&self, runtime: &Handle, ttl: Option<Duration>) -> Result<()> {
        block_on(runtime, self.extend(ttl))
    }
}

impl Fence {
    pub fn fenced_execute_blocking(
        &self,
        runtime: &Handle,
        token: impl Into<FenceToken>,
        statements: &[Statement],
    ) -> Result<Vec<u64>> {
        block_on(runtime, self.fenced_execute(token, statements))
    }
}
