//! Leader election for the Kotlin `Leadership`: the core's `campaign` and `leader`. A campaign
//! answers with the election's lease; the Kotlin layer shows it as a leadership (term = token,
//! resign = release), as the Python and Node bindings do.

use std::sync::Arc;

use fencelock::Leader;

use crate::error::NativeError;
use crate::handoff::{Handed, NativeHandoff};
use crate::lease::NativeLease;
use crate::locker::{NativeHolder, NativeLocker};
use crate::options::{NativeLockOptions, lock_options};
use crate::runtime::{OnDrop, run};

/// Who leads an election now, as an observer sees it.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeLeader {
    /// The leader's term: its lease's fencing token.
    pub term: i64,
    pub holder: Option<NativeHolder>,
}

impl From<Leader> for NativeLeader {
    fn from(leader: Leader) -> Self {
        NativeLeader {
            term: leader.term as i64,
            holder: leader.holder.map(NativeHolder::from),
        }
    }
}

#[uniffi::export]
impl NativeLocker {
    /// Campaigns for leadership of `name`: waits up to `options.wait` (forever when absent) to
    /// acquire the election's lock. Cancelling the caller stops the campaign and leaves nothing
    /// behind.
    pub async fn campaign(
        &self,
        name: String,
        options: NativeLockOptions,
        handoff: Arc<NativeHandoff>,
    ) -> Result<(), NativeError> {
        let options = lock_options(options)?;
        let locker = self.core().clone();
        let leadership = run(
            async move { locker.campaign(&name, &options).await },
            OnDrop::Cancel,
        )
        .await?;
        handoff.put(Handed::Lease(NativeLease::new(leadership.lease().clone())));
        Ok(())
    }

    /// Who leads `name` now and in which term, without campaigning; none when nobody does.
    pub async fn leader(&self, name: String) -> Result<Option<NativeLeader>, NativeError> {
        let locker = self.core().clone();
        let leader = run(async move { locker.leader(&name).await }, OnDrop::Cancel).await?;
        Ok(leader.map(NativeLeader::from))
    }
}
