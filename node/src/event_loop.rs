//! A small executor on Node's own event loop (libuv) for the calls on the hot path (acquire,
//! tryAcquire, extend, release): their futures are polled on the JS thread, and a Promise is
//! settled there without any other thread taking part when the core can do the call's round
//! trip on the JS thread (`fencelock::event_loop`: on one Redis instance, a caller-driven
//! connection in non-blocking mode).
//!
//! Why: a call handed to a runtime worker costs two thread wake-ups (the worker is woken for
//! the request, the JS thread for the answer), more than the round trip on loopback
//! (bench/RESULTS.md). Here the JS thread writes the request, and when the reply is not there
//! yet the future returns pending with the socket to watch: a `uv_poll_t` on the loop polls
//! the future again once the socket is readable (a `uv_timer_t` at the core's deadline), as
//! Node's own clients read their sockets. Anything else the future waits for (a lock held by
//! another, a backend without caller-driven I/O, a cancellation) wakes it from the runtime's
//! threads through a `uv_async_t`, and it is polled again on the JS thread.
//!
//! The handles are made per call and closed when it settles; while a call is pending they keep
//! the loop alive, as a pending napi async call does. A Promise settled from a libuv callback
//! is settled inside a callback scope (`napi_open_callback_scope`), so its reactions run
//! before the loop goes on. Linux only, as everything built here; libuv's functions are those
//! the `node` executable exports.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::ptr;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Wake, Waker};
use std::time::Instant;

use fencelock::event_loop::{LoopPoll, poll_on_event_loop};
use napi::bindgen_prelude::*;
use napi::sys;
use tokio::runtime::Handle;

use crate::error::{Code, Error, Result, from_napi, panic_to_js, to_js};

/// The runtime the core's futures run in (the one napi was given), set at module load.
pub(crate) static RUNTIME: OnceLock<Handle> = OnceLock::new();

const UV_ASYNC: c_int = 1;
const UV_POLL: c_int = 8;
const UV_TIMER: c_int = 13;
const UV_READABLE: c_int = 1;

type UvHandle = *mut c_void;

unsafe extern "C" {
    fn uv_handle_size(kind: c_int) -> usize;
    fn uv_async_init(
        event_loop: *mut sys::uv_loop_s,
        handle: UvHandle,
        cb: extern "C" fn(UvHandle),
    ) -> c_int;
    fn uv_async_send(handle: UvHandle) -> c_int;
    fn uv_poll_init(event_loop: *mut sys::uv_loop_s, handle: UvHandle, fd: c_int) -> c_int;
    fn uv_poll_start(
        handle: UvHandle,
        events: c_int,
        cb: extern "C" fn(UvHandle, c_int, c_int),
    ) -> c_int;
    fn uv_poll_stop(handle: UvHandle) -> c_int;
    fn uv_timer_init(event_loop: *mut sys::uv_loop_s, handle: UvHandle) -> c_int;
    fn uv_timer_start(
        handle: UvHandle,
        cb: extern "C" fn(UvHandle),
        timeout: u64,
        repeat: u64,
    ) -> c_int;
    fn uv_timer_stop(handle: UvHandle) -> c_int;
    fn uv_close(handle: UvHandle, cb: extern "C" fn(UvHandle));
}

/// How a finished call settles its Promise, on the JS thread: the value to resolve with, or
/// the error to reject with.
type Settle =
    Box<dyn FnOnce(sys::napi_env) -> std::result::Result<sys::napi_value, sys::napi_value>>;

/// Runs `fut` on the JS thread's loop and returns a Promise of its result; falls back to the
/// runtime (`runtime::promise`) where this executor is not set up.
pub(crate) fn promise_on_loop<T, F>(env: &Env, fut: F) -> Result<PromiseRaw<'static, T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let Some(runtime) = RUNTIME.get() else {
        return Err(to_js(fencelock::Error::internal(
            "fencelock's runtime did not start",
        )));
    };
    let scope = LoopScope::of(env)?;
    let fut = fencelock::spans::in_caller_context(fencelock::spans::numbered::take(), fut);
    let settled = async move {
        let result = fut.await;
        Box::new(move |env: sys::napi_env| settle_value(env, result)) as Settle
    };
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    check(unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) })?;
    let task = Box::into_raw(Box::new(Task {
        fut: Box::pin(settled),
        runtime: runtime.clone(),
        deferred,
        scope,
        wake: None,
        socket: None,
        timer: ptr::null_mut(),
    }));
    PENDING.with(|p| p.borrow_mut().push(task));
    // SAFETY: the task was just made and is owned by this executor until it settles; this
    // runs inside a JS call, so settling needs no callback scope of its own.
    unsafe { poll_task(task, false) };
    Ok(PromiseRaw::new(env.raw(), promise))
}

fn settle_value<T: ToNapiValue>(
    env: sys::napi_env,
    result: Result<T>,
) -> std::result::Result<sys::napi_value, sys::napi_value> {
    let error = match result {
        Ok(value) => match unsafe { T::to_napi_value(env, value) } {
            Ok(value) => return Ok(value),
            Err(e) => from_napi(e),
        },
        Err(e) => e,
    };
    // SAFETY: `env` is the JS thread's, inside a handle scope.
    let env = Env::from_raw(env);
    Err(JsError::from(error).into_unknown(env).raw())
}

fn check(status: sys::napi_status) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(
            Code::Napi(Status::from(status)),
            "a Node-API call of fencelock's event-loop executor failed",
        ))
    }
}

/// What settling from a libuv callback needs: the env, its loop, and an async context with a
/// resource object for `napi_open_callback_scope`. One per JS thread (main or worker).
#[derive(Clone, Copy)]
struct LoopScope {
    env: sys::napi_env,
    event_loop: *mut sys::uv_loop_s,
    context: sys::napi_async_context,
    resource: sys::napi_ref,
}

thread_local! {
    static SCOPE: RefCell<Option<LoopScope>> = const { RefCell::new(None) };
    /// The tasks pending on this thread's loop, for [`on_env_cleanup`].
    static PENDING: RefCell<Vec<*mut Task>> = const { RefCell::new(Vec::new()) };
}

/// The env is going away (a worker thread ends, or the process exits) with calls pending:
/// their handles are closed, or Node would find them open when it closes the loop, and their
/// futures dropped (an acquire in flight sends its clean-up release). Their Promises are never
/// settled: nobody is left to see them.
extern "C" fn on_env_cleanup(_arg: *mut c_void) {
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    for task in pending {
        // SAFETY: a task in PENDING is live, on this thread.
        let task = unsafe { Box::from_raw(task) };
        unsafe { close_handles(&task) };
        // Dropping a future may start clean-up on the runtime.
        let runtime = task.runtime.clone();
        let _context = runtime.enter();
        let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(task)));
    }
    SCOPE.with(|s| s.borrow_mut().take());
}

impl LoopScope {
    fn of(env: &Env) -> Result<LoopScope> {
        if let Some(scope) = SCOPE.with(|s| *s.borrow())
            && scope.env == env.raw()
        {
            return Ok(scope);
        }
        let raw = env.raw();
        let event_loop = env.get_uv_event_loop().map_err(from_napi)?;
        let mut resource = ptr::null_mut();
        check(unsafe { sys::napi_create_object(raw, &mut resource) })?;
        let mut name = ptr::null_mut();
        let label = "fencelock";
        check(unsafe {
            sys::napi_create_string_utf8(
                raw,
                label.as_ptr().cast(),
                label.len() as isize,
                &mut name,
            )
        })?;
        let mut context = ptr::null_mut();
        check(unsafe { sys::napi_async_init(raw, resource, name, &mut context) })?;
        let mut reference = ptr::null_mut();
        check(unsafe { sys::napi_create_reference(raw, resource, 1, &mut reference) })?;
        check(unsafe {
            sys::napi_add_env_cleanup_hook(raw, Some(on_env_cleanup), ptr::null_mut())
        })?;
        let scope = LoopScope {
            env: raw,
            event_loop,
            context,
            resource: reference,
        };
        SCOPE.with(|s| *s.borrow_mut() = Some(scope));
        Ok(scope)
    }
}

/// Calls `uv_async_send` on a pending task's async handle from any thread, while the task
/// lives (the handle is taken away, under the lock, before it is closed).
struct AsyncWake {
    handle: Mutex<Option<SendHandle>>,
}

struct SendHandle(UvHandle);
// SAFETY: only `uv_async_send` is called from other threads, which libuv allows.
unsafe impl Send for SendHandle {}

impl Wake for AsyncWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let handle = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(handle) = &*handle {
            // SAFETY: the handle is open while it is in the option.
            unsafe { uv_async_send(handle.0) };
        }
    }
}

struct Task {
    fut: Pin<Box<dyn Future<Output = Settle> + Send>>,
    runtime: Handle,
    deferred: sys::napi_deferred,
    scope: LoopScope,
    /// The async handle its waker wakes, made at its first pending poll.
    wake: Option<(Arc<AsyncWake>, UvHandle)>,
    /// The poll handle and the descriptor it watches.
    socket: Option<(UvHandle, c_int)>,
    timer: UvHandle,
}

/// A zeroed handle of `kind` whose `data` (its first field) points at `task`.
unsafe fn new_handle(kind: c_int, task: *mut Task) -> UvHandle {
    let handle = unsafe { libc::calloc(1, uv_handle_size(kind)) };
    unsafe { *(handle as *mut *mut Task) = task };
    handle
}

extern "C" fn free_handle(handle: UvHandle) {
    unsafe { libc::free(handle) };
}

unsafe fn task_of(handle: UvHandle) -> *mut Task {
    unsafe { *(handle as *mut *mut Task) }
}

extern "C" fn on_wake(handle: UvHandle) {
    unsafe { poll_from_loop(task_of(handle)) };
}

extern "C" fn on_readable(handle: UvHandle, _status: c_int, _events: c_int) {
    unsafe { poll_from_loop(task_of(handle)) };
}

extern "C" fn on_deadline(handle: UvHandle) {
    unsafe { poll_from_loop(task_of(handle)) };
}

/// A panic must not unwind out of a libuv callback (it would abort Node): the future's own
/// are caught by the core; anything else is dropped here.
unsafe fn poll_from_loop(task: *mut Task) {
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| unsafe { poll_task(task, true) }));
}

/// Polls the task once on the JS thread; settles and frees it when it finished, else watches
/// what it waits for. `from_loop`: called from a libuv callback (settling then needs a
/// callback scope).
///
/// SAFETY: `task` is a live task of this executor, on its JS thread.
unsafe fn poll_task(task: *mut Task, from_loop: bool) {
    let t = unsafe { &mut *task };
    // Whatever it watched is watched again below if it still waits for it.
    if let Some((handle, _)) = t.socket {
        unsafe { uv_poll_stop(handle) };
    }
    if !t.timer.is_null() {
        unsafe { uv_timer_stop(t.timer) };
    }
    let event_loop = t.scope.event_loop;
    // Made before the first poll: the future may hand its waker to another thread during it.
    let wake = match &t.wake {
        Some((wake, _)) => wake.clone(),
        None => {
            let handle = unsafe { new_handle(UV_ASYNC, task) };
            unsafe { uv_async_init(event_loop, handle, on_wake) };
            let wake = Arc::new(AsyncWake {
                handle: Mutex::new(Some(SendHandle(handle))),
            });
            t.wake = Some((wake.clone(), handle));
            wake
        }
    };
    let waker = Waker::from(wake);
    let mut cx = Context::from_waker(&waker);
    let polled = poll_on_event_loop(&t.runtime, t.fut.as_mut(), &mut cx);
    // A poll handle outlives its use only while the task still waits for that socket: the
    // connection went back to its pool during this poll, and another task may take it; libuv
    // allows one poll handle per descriptor (closing one unregisters the descriptor for all),
    // so it is closed now, before any other task can watch the descriptor.
    let still_watched = match &polled {
        LoopPoll::Pending(Some(wait)) => t.socket.is_some_and(|(_, fd)| fd == wait.fd),
        _ => false,
    };
    if !still_watched && let Some((handle, _)) = t.socket.take() {
        unsafe { uv_close(handle, free_handle) };
    }
    let settle = match polled {
        LoopPoll::Ready(settle) => settle,
        LoopPoll::Panicked(payload) => {
            let error = panic_to_js(payload);
            Box::new(move |env: sys::napi_env| settle_value::<()>(env, Err(error))) as Settle
        }
        LoopPoll::Pending(None) => return,
        LoopPoll::Pending(Some(wait)) => {
            unsafe { watch(task, wait.fd, wait.deadline) };
            return;
        }
    };
    unsafe { finish(task, settle, from_loop) };
}

/// Polls the task again once `fd` is readable, or at `deadline`.
unsafe fn watch(task: *mut Task, fd: c_int, deadline: Instant) {
    let t = unsafe { &mut *task };
    let event_loop = t.scope.event_loop;
    let socket = match t.socket {
        Some((handle, watched)) if watched == fd => handle,
        other => {
            if let Some((old, _)) = other {
                unsafe { uv_close(old, free_handle) };
            }
            let handle = unsafe { new_handle(UV_POLL, task) };
            unsafe { uv_poll_init(event_loop, handle, fd) };
            t.socket = Some((handle, fd));
            handle
        }
    };
    if t.timer.is_null() {
        t.timer = unsafe { new_handle(UV_TIMER, task) };
        unsafe { uv_timer_init(event_loop, t.timer) };
    }
    unsafe { uv_poll_start(socket, UV_READABLE, on_readable) };
    let left = deadline.saturating_duration_since(Instant::now());
    // Rounded up: polled before the deadline, the future would only ask to wait again.
    let millis = u64::try_from(left.as_millis()).unwrap_or(u64::MAX) + 1;
    unsafe { uv_timer_start(t.timer, on_deadline, millis, 0) };
}

/// Settles the task's Promise and frees it with its handles.
unsafe fn finish(task: *mut Task, settle: Settle, from_loop: bool) {
    PENDING.with(|p| p.borrow_mut().retain(|&pending| pending != task));
    let t = unsafe { Box::from_raw(task) };
    let env = t.scope.env;
    unsafe { close_handles(&t) };
    let deferred = t.deferred;
    let scope = t.scope;
    {
        // A future that panicked is dropped unfinished, and may start clean-up on the runtime.
        let runtime = t.runtime.clone();
        let _context = runtime.enter();
        drop(t);
    }
    unsafe {
        if from_loop {
            in_callback_scope(&scope, || resolve(env, deferred, settle));
        } else {
            resolve(env, deferred, settle);
        }
    }
}

/// Closes a task's handles; its waker wakes nobody from now on.
unsafe fn close_handles(t: &Task) {
    if let Some((wake, handle)) = &t.wake {
        wake.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
        unsafe { uv_close(*handle, free_handle) };
    }
    if let Some((handle, _)) = t.socket {
        unsafe { uv_close(handle, free_handle) };
    }
    if !t.timer.is_null() {
        unsafe { uv_close(t.timer, free_handle) };
    }
}

unsafe fn resolve(env: sys::napi_env, deferred: sys::napi_deferred, settle: Settle) {
    match settle(env) {
        Ok(value) => unsafe { sys::napi_resolve_deferred(env, deferred, value) },
        Err(error) => unsafe { sys::napi_reject_deferred(env, deferred, error) },
    };
}

/// Runs `body` (which calls into JS) from a libuv callback, inside a handle scope and a
/// callback scope: closing the callback scope runs the Promise reactions it queued.
unsafe fn in_callback_scope(scope: &LoopScope, body: impl FnOnce()) {
    let env = scope.env;
    let mut handles = ptr::null_mut();
    unsafe { sys::napi_open_handle_scope(env, &mut handles) };
    let mut resource = ptr::null_mut();
    unsafe { sys::napi_get_reference_value(env, scope.resource, &mut resource) };
    let mut callback = ptr::null_mut();
    unsafe { sys::napi_open_callback_scope(env, resource, scope.context, &mut callback) };
    body();
    unsafe { sys::napi_close_callback_scope(env, callback) };
    unsafe { sys::napi_close_handle_scope(env, handles) };
}
