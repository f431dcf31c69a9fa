//! A small executor that plays a host's event loop (what the Node binding's does on libuv): it
//! polls a future through `fencelock::event_loop` on the test's thread, watches the socket a
//! pending poll names with `poll(2)`, and otherwise waits for the future's waker.
#![allow(dead_code)]

use std::future::Future;
use std::os::fd::RawFd;
use std::pin::pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use fencelock::Locker;
use fencelock::event_loop::{LoopPoll, poll_on_event_loop};

/// Woken from the runtime's threads: a flag and a condition variable.
#[derive(Default)]
struct Flag {
    woken: Mutex<bool>,
    signal: Condvar,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        *self.woken.lock().unwrap() = true;
        self.signal.notify_all();
    }
}

/// What driving one future took.
#[derive(Debug, Default)]
pub struct Driven {
    /// Polls that returned pending with a socket to watch: replies read on the loop.
    pub socket_waits: u32,
    /// Polls that returned pending for something else (a waker from the runtime).
    pub other_waits: u32,
}

/// Whether `fd` becomes readable within `timeout`.
fn readable(fd: RawFd, timeout: Duration) -> bool {
    let mut fds = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd for the call's duration.
    unsafe { libc::poll(&mut fds, 1, millis) > 0 }
}

/// Drives `fut` on this thread as an event loop would, to its end.
pub fn on_loop<F: Future>(locker: &Locker, fut: F) -> (F::Output, Driven) {
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    let mut driven = Driven::default();
    let given_up = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < given_up, "the future never finished");
        *flag.woken.lock().unwrap() = false;
        match poll_on_event_loop(locker.runtime(), fut.as_mut(), &mut cx) {
            LoopPoll::Ready(output) => return (output, driven),
            LoopPoll::Panicked(payload) => std::panic::resume_unwind(payload),
            LoopPoll::Pending(Some(wait)) => {
                driven.socket_waits += 1;
                let left = wait.deadline.saturating_duration_since(Instant::now());
                readable(wait.fd, left);
            }
            LoopPoll::Pending(None) => {
                driven.other_waits += 1;
                let woken = flag.woken.lock().unwrap();
                let _ = flag
                    .signal
                    .wait_timeout_while(woken, Duration::from_secs(1), |woken| !*woken)
                    .unwrap();
            }
        }
    }
}
