//! Handing an acquired lease to Kotlin across uniffi's async boundary without ever losing it.
//!
//! uniffi stores an async export's answer already lowered: an `Arc` object becomes a raw handle
//! the moment the future completes. A coroutine cancelled between that moment and its resumption
//! frees the future without taking the answer, and the handle (with the lease in it) is leaked
//! for good: held, and renewed, until the process ends. So an async acquire answers nothing and
//! puts its lease here instead, in an object Kotlin made before the call and closes after it in
//! a `finally`: what Kotlin took is Kotlin's; what it did not take is dropped with the handoff,
//! and a dropped lease is released in the background.

use std::sync::{Arc, Mutex, PoisonError};

use crate::lease::NativeLease;
use crate::multi::NativeMultiLease;

pub(crate) enum Handed {
    Lease(Arc<NativeLease>),
    Many(Arc<NativeMultiLease>),
}

/// The slot one async acquire fills (`put`) and its Kotlin caller empties (`take_…`).
#[derive(uniffi::Object, Default)]
pub struct NativeHandoff {
    slot: Mutex<Option<Handed>>,
}

impl NativeHandoff {
    pub(crate) fn put(&self, handed: Handed) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(handed);
    }

    fn take(&self) -> Option<Handed> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

#[uniffi::export]
impl NativeHandoff {
    #[uniffi::constructor]
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The lease the acquire put here (once); none after a try that found the lock busy.
    pub fn take_lease(&self) -> Option<Arc<NativeLease>> {
        match self.take() {
            Some(Handed::Lease(lease)) => Some(lease),
            _ => None,
        }
    }

    /// The multi-name lease the acquire put here (once).
    pub fn take_multi_lease(&self) -> Option<Arc<NativeMultiLease>> {
        match self.take() {
            Some(Handed::Many(multi)) => Some(multi),
            _ => None,
        }
    }

    /// Drops what nobody took: its lease is released in the background.
    pub fn discard(&self) {
        drop(self.take());
    }
}
