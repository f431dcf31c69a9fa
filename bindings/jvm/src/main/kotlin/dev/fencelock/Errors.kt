package dev.fencelock

import dev.fencelock.ffi.InternalException
import dev.fencelock.ffi.NativeErrorCode
import dev.fencelock.ffi.NativeException

/** The stable error codes shared by every language (docs/design.md §6.1); never renamed once released. */
enum class ErrorCode {
    /** Not acquired before the `wait` deadline. */
    TIMEOUT,

    /** The lease was lost (expired, session expired, taken over), or used after that. */
    LOST,

    /** Release or extend after an explicit release. */
    NOT_HELD,

    /** The backend is unreachable, or no quorum. */
    UNAVAILABLE,

    /** Bad name, ttl, wait, URL or option. */
    INVALID_ARGUMENT,

    /** Authentication or authorization refused. */
    AUTH,

    /** A fence rejected an older token. */
    STALE_TOKEN,

    /** Any other backend error, with its message. */
    BACKEND,

    /** A non-reentrant acquire of a name the same thread or coroutine already holds. */
    DEADLOCK,

    /** The Locker was closed. */
    CLOSED,

    /** A bug in fencelock, including a caught Rust panic. */
    INTERNAL,
}

/**
 * Every error fencelock reports: one subclass per [ErrorCode], so callers catch what they mean
 * (`catch (LockTimeoutException e)`) or everything (`catch (FencelockException e)`) and read
 * [code]. Unchecked, so Java code need not declare them. Cancellation is not one of these: a
 * cancelled coroutine gets its `CancellationException`, and a blocking call interrupted while it
 * waits throws `InterruptedException` (declared, so Java can catch it), the flag cleared.
 */
sealed class FencelockException(
    /** The stable code, the same in every language. */
    val code: ErrorCode,
    message: String,
) : RuntimeException(message)

/** TIMEOUT: not acquired before the `wait` deadline. */
class LockTimeoutException(message: String) : FencelockException(ErrorCode.TIMEOUT, message)

/** LOST: the lease was lost (expired, session expired, taken over), or used after that. */
class LockLostException(message: String) : FencelockException(ErrorCode.LOST, message)

/** NOT_HELD: release or extend after an explicit release. */
class LockNotHeldException(message: String) : FencelockException(ErrorCode.NOT_HELD, message)

/** UNAVAILABLE: the backend is unreachable, or no quorum. */
class LockUnavailableException(message: String) : FencelockException(ErrorCode.UNAVAILABLE, message)

/** INVALID_ARGUMENT: bad name, ttl, wait, URL or option. */
class LockInvalidArgumentException(message: String) : FencelockException(ErrorCode.INVALID_ARGUMENT, message)

/** AUTH: authentication or authorization refused. */
class LockAuthException(message: String) : FencelockException(ErrorCode.AUTH, message)

/** STALE_TOKEN: a fence rejected an older token. */
class StaleTokenException(message: String) : FencelockException(ErrorCode.STALE_TOKEN, message)

/** BACKEND: any other backend error, with its message. */
class LockBackendException(message: String) : FencelockException(ErrorCode.BACKEND, message)

/** DEADLOCK: a non-reentrant acquire of a name the same thread or coroutine already holds. */
class LockDeadlockException(message: String) : FencelockException(ErrorCode.DEADLOCK, message)

/** CLOSED: the Locker was closed. */
class LockClosedException(message: String) : FencelockException(ErrorCode.CLOSED, message)

/** INTERNAL: a bug in fencelock, including a caught Rust panic. */
class LockInternalException(message: String) : FencelockException(ErrorCode.INTERNAL, message)

internal fun exceptionFor(code: ErrorCode, message: String): FencelockException = when (code) {
    ErrorCode.TIMEOUT -> LockTimeoutException(message)
    ErrorCode.LOST -> LockLostException(message)
    ErrorCode.NOT_HELD -> LockNotHeldException(message)
    ErrorCode.UNAVAILABLE -> LockUnavailableException(message)
    ErrorCode.INVALID_ARGUMENT -> LockInvalidArgumentException(message)
    ErrorCode.AUTH -> LockAuthException(message)
    ErrorCode.STALE_TOKEN -> StaleTokenException(message)
    ErrorCode.BACKEND -> LockBackendException(message)
    ErrorCode.DEADLOCK -> LockDeadlockException(message)
    ErrorCode.CLOSED -> LockClosedException(message)
    ErrorCode.INTERNAL -> LockInternalException(message)
}

private fun NativeErrorCode.toPublic(): ErrorCode = when (this) {
    NativeErrorCode.TIMEOUT -> ErrorCode.TIMEOUT
    NativeErrorCode.LOST -> ErrorCode.LOST
    NativeErrorCode.NOT_HELD -> ErrorCode.NOT_HELD
    NativeErrorCode.UNAVAILABLE -> ErrorCode.UNAVAILABLE
    NativeErrorCode.INVALID_ARGUMENT -> ErrorCode.INVALID_ARGUMENT
    NativeErrorCode.AUTH -> ErrorCode.AUTH
    NativeErrorCode.STALE_TOKEN -> ErrorCode.STALE_TOKEN
    NativeErrorCode.BACKEND -> ErrorCode.BACKEND
    NativeErrorCode.DEADLOCK -> ErrorCode.DEADLOCK
    NativeErrorCode.CLOSED -> ErrorCode.CLOSED
    NativeErrorCode.INTERNAL -> ErrorCode.INTERNAL
}

/** The public exception for what the native library threw; anything else passes through. */
internal fun translate(e: Throwable): Throwable = when (e) {
    is NativeException.Failure -> exceptionFor(e.code.toPublic(), e.detail)

    // uniffi's own report of a panic it caught (the library's guards should catch them first).
    is InternalException -> LockInternalException("a bug in fencelock: ${e.message}; please report it")

    else -> e
}

internal inline fun <T> ffi(call: () -> T): T = translated {
    val caller = Callers.enter()
    try {
        call()
    } finally {
        Callers.exit(caller)
    }
}

/** Runs a native call, turning what it throws into the public exceptions. */
internal inline fun <T> translated(call: () -> T): T = try {
    call()
} catch (e: NativeException) {
    throw translate(e)
} catch (e: InternalException) {
    throw translate(e)
} catch (e: java.nio.charset.CharacterCodingException) {
    // uniffi encodes every String argument strictly: a lone surrogate cannot be UTF-8 (a lax
    // encoder would make "a\uD800" and "a\uDC00" the same name "a?").
    throw LockInvalidArgumentException("a text argument is not valid Unicode (it contains a lone surrogate)")
}

internal fun invalidArgument(message: String): Nothing = throw LockInvalidArgumentException(message)
