//! The tokio runtime a host without one of its own (the Python and JVM bindings) runs the core
//! on.
//!
//! One worker thread by default. A Locker's traffic goes through one connection task per
//! server, and the work per operation is a few microseconds, so one thread keeps up with any
//! lock rate a server can serve. More workers make each wake-up a chance for tokio to wake a
//! second thread to steal the task, and on small machines those hand-offs cost more than the
//! work: the JVM's uncontended Redis cycle measured about 45% faster with one worker than with
//! two (bench/RESULTS.md, JVM section). `FENCELOCK_RUNTIME_THREADS` sets another count (for a
//! process that holds locks on many servers at high rates). Nothing in the core blocks a worker:
//! SQLite runs on sqlx's own threads, and the watchdog and log forwarding have their own.

use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::runtime::{Builder, Runtime};

/// This process's id, cached: the core and the bindings compare it on every call to notice a
/// child made by `fork()` (whose threads, runtime and connections are gone), and asking the OS
/// each time cost a dozen system calls per acquire and release. A `fork()` through the C
/// library clears the cache in the child (`pthread_atfork`), so the child reads its own id.
pub fn process_id() -> u32 {
    static PID: AtomicU32 = AtomicU32::new(0);
    static CLEAR_IN_CHILD: Once = Once::new();
    extern "C" fn clear_in_child() {
        PID.store(0, Ordering::Relaxed);
    }
    let cached = PID.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    CLEAR_IN_CHILD.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic, which is async-signal-safe
        // and so allowed in a child of a multi-threaded process.
        unsafe {
            libc::pthread_atfork(None, None, Some(clear_in_child));
        }
    });
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

/// The environment variable that sets the number of worker threads.
pub const THREADS_VARIABLE: &str = "FENCELOCK_RUNTIME_THREADS";

/// The most worker threads the variable may ask for.
const MAX_THREADS: usize = 64;

/// Builds the host runtime: multi-threaded (so a blocked caller never stalls the I/O), with
/// `FENCELOCK_RUNTIME_THREADS` workers (1 when unset), its threads named `thread_name`.
pub fn host_runtime(thread_name: &str) -> crate::error::Result<Runtime> {
    let threads = worker_threads(std::env::var(THREADS_VARIABLE).ok().as_deref())?;
    Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .thread_name(thread_name)
        .build()
        .map_err(|e| crate::error::Error::internal(format!("cannot start the tokio runtime: {e}")))
}

/// The worker count the variable's value asks for: a whole number from 1 to 64, 1 when unset.
fn worker_threads(value: Option<&str>) -> crate::error::Result<usize> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(1);
    };
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(crate::error::Error::invalid(format!(
            "{THREADS_VARIABLE} must be a whole number from 1 to {MAX_THREADS}, got {value:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn one_worker_unless_asked() {
        assert_eq!(worker_threads(None).unwrap(), 1);
        assert_eq!(worker_threads(Some("")).unwrap(), 1);
        assert_eq!(worker_threads(Some(" 4 ")).unwrap(), 4);
        assert_eq!(worker_threads(Some("64")).unwrap(), 64);
    }

    #[test]
    fn bad_counts_are_invalid_arguments() {
        for bad in ["0", "65", "-1", "two", "1.5"] {
            let err = worker_threads(Some(bad)).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad}");
            assert!(err.to_string().contains(THREADS_VARIABLE), "{err}");
        }
    }

    #[test]
    fn the_process_id_is_the_os_one() {
        assert_eq!(process_id(), std::process::id());
        assert_eq!(process_id(), std::process::id());
    }

    #[test]
    fn the_runtime_runs_tasks() {
        let rt = host_runtime("fencelock-test-rt").unwrap();
        assert_eq!(
            rt.block_on(async { tokio::spawn(async { 6 * 7 }).await.unwrap() }),
            42
        );
    }
}
