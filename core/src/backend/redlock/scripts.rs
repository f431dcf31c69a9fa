//! The two scripts Redlock adds to the Redis lock's (acquire, renew and release are
//! [`crate::backend::redis::mutex_scripts`]'s, unchanged, so a key written by one is read by the other).

use std::sync::LazyLock;

use redis::Script;

use crate::backend::redis::mutex_scripts::with_gt;

/// Fencing phase 2 (docs/design.md §3.3).
/// KEYS: lock, fence counter. ARGV: owner, T, counter ttl ms.
/// If the lock is still this owner's, raises the counter to at least T and records T as the
/// lock's token; returns 1. Returns 0 (and writes nothing) when the lock is not ours.
pub static RAISE: LazyLock<Script> = LazyLock::new(|| {
    with_gt(
        r#"
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
local counter = redis.call('GET', KEYS[2])
if (not counter) or gt(ARGV[2], counter) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
redis.call('HSET', KEYS[1], 'token', ARGV[2])
return 1
"#,
    )
});

/// KEYS: lock, fence counter. Returns `{pttl, owner or false, token or false, holder or false,
/// counter or false}`: like the single instance's INSPECT, plus the owner, so that keys of the
/// same acquisition can be told apart from a split vote's.
pub static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local pttl = redis.call('PTTL', KEYS[1])
local owner, token, holder = false, false, false
if pttl ~= -2 then
  owner = redis.call('HGET', KEYS[1], 'owner')
  token = redis.call('HGET', KEYS[1], 'token')
  holder = redis.call('HGET', KEYS[1], 'holder')
end
return {pttl, owner, token, holder, redis.call('GET', KEYS[2])}
"#,
    )
});

/// Keeps the stored `max_ttl` at the largest value any Locker knows: KEYS: the max_ttl key.
/// ARGV: this Locker's value in ms. Writes it when the key is missing (a master restarted and
/// lost it) or smaller; returns the stored value. Sent as EVAL (small, and never NOSCRIPT after
/// a restart) in the same pipeline as every phase-1 acquire.
pub const RAISE_MAX_TTL: &str = r#"
local v = redis.call('GET', KEYS[1])
if (not v) or (tonumber(v) or 0) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return v
"#;
