//! The Lua scripts of the Redis lock (design §3), shared by the single-instance, Cluster and
//! Redlock backends. Each runs atomically on one server, in one round trip, and every key it
//! touches carries the lock's hash tag, so on a Cluster they all live in one slot.
//!
//! Stored layout (version [`LAYOUT_VERSION`], the `v` field):
//! - `<prefix>:{ENC}` hash: `owner` (32 hex digits), `token`, `holder` (JSON), `v`; PX ttl
//! - `<prefix>:{ENC}:fence` string: the last token minted; a long expiry is safe because the
//!   next token is at least the server's clock in microseconds anyway
//! - channel `<prefix>:{ENC}:released`: a message on every release

use std::sync::LazyLock;

use redis::Script;

pub const LAYOUT_VERSION: &str = "1";

/// Tokens are decimal strings in every script, never Lua numbers (doubles, exact only below
/// 2^53): `gt(a, b)` compares two of them (non-negative, no leading zeros) exactly, and
/// `succ(a)` adds one, digit by digit (INCR would do it too, but would need one more command in
/// every least-privilege ACL).
pub(crate) const LUA_GT: &str = r#"
local function gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local function succ(a)
  local i = #a
  while i > 0 and string.byte(a, i) == 57 do i = i - 1 end
  if i == 0 then return '1' .. string.rep('0', #a) end
  return string.sub(a, 1, i - 1) .. string.char(string.byte(a, i) + 1) .. string.rep('0', #a - i)
end
"#;

/// A script that compares tokens: [`LUA_GT`] first.
pub(crate) fn with_gt(body: &str) -> Script {
    Script::new(&format!("{LUA_GT}{body}"))
}

/// How long a free lock's counter is kept: long, but not forever. Losing it is harmless
/// (the time floor), keeping it bounds memory for names used once.
pub const FENCE_COUNTER_TTL_MS: u64 = 30 * 24 * 3600 * 1000;

/// KEYS: lock, fence counter. ARGV: owner, ttl ms, holder, layout version, counter ttl ms.
/// Returns `{1, token}` when taken, `{0, pttl}` when held (pttl -1: held with no expiry).
/// The token is `max(counter + 1, the server's TIME in µs)`.
pub static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    with_gt(
        r#"
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  return {0, pttl}
end
local now = redis.call('TIME')
local floor = now[1] .. string.format('%06d', tonumber(now[2]))
local t = succ(redis.call('GET', KEYS[2]) or '0')
if gt(floor, t) then t = floor end
redis.call('SET', KEYS[2], t, 'PX', ARGV[5])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', t, 'holder', ARGV[3], 'v', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, t}
"#,
    )
});

/// KEYS: lock. ARGV: owner, ttl ms. Never re-creates an expired lock.
pub static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#,
    )
});

/// KEYS: lock. ARGV: owner, release channel, publish command (PUBLISH or SPUBLISH).
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[3], ARGV[2], 'released')
  return 1
end
return 0
"#,
    )
});

/// An operator's release, whoever holds the lock. KEYS: lock. ARGV: release channel, publish
/// command. The fence counter is not touched: the next token still exceeds every earlier one.
pub static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call(ARGV[2], ARGV[1], 'released')
  return 1
end
return 0
"#,
    )
});

/// KEYS: lock, fence counter. Returns `{pttl, token or false, holder or false, counter or false}`.
pub static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local pttl = redis.call('PTTL', KEYS[1])
local token = false
local holder = false
if pttl ~= -2 then
  token = redis.call('HGET', KEYS[1], 'token')
  holder = redis.call('HGET', KEYS[1], 'holder')
end
return {pttl, token, holder, redis.call('GET', KEYS[2])}
"#,
    )
});

/// The fence (design §3). KEYS: fence record, data key. ARGV: token, lock key, value.
/// Returns 1 written, 0 stale, -1 another lock.
pub static FENCED_SET: LazyLock<Script> = LazyLock::new(|| {
    with_gt(
        r#"
local lock = redis.call('HGET', KEYS[1], 'lock')
if lock and ARGV[2] ~= '' and lock ~= ARGV[2] then return -1 end
local highest = redis.call('HGET', KEYS[1], 'token')
if highest and gt(highest, ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
if (not lock) and ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'lock', ARGV[2]) end
redis.call('SET', KEYS[2], ARGV[3])
return 1
"#,
    )
});

/// KEYS: fence record. ARGV: token, lock key. Returns 1 acceptable, 0 stale, -1 another lock.
pub static FENCE_CHECK: LazyLock<Script> = LazyLock::new(|| {
    with_gt(
        r#"
local lock = redis.call('HGET', KEYS[1], 'lock')
if lock and ARGV[2] ~= '' and lock ~= ARGV[2] then return -1 end
local highest = redis.call('HGET', KEYS[1], 'token')
if highest and gt(highest, ARGV[1]) then return 0 end
return 1
"#,
    )
});
