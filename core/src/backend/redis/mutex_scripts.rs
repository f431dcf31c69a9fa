//! The Lua scripts of the Redis lock (docs/design.md §3.2), shared by the single-instance, Cluster
//! and Redlock backends. Each runs atomically on one server, in one round trip, and every key it
//! touches carries the lock's hash tag, so on a Cluster they all live in one slot.
//!
//! Stored layout (version [`LAYOUT_VERSION`], the `v` field):
//! - `<prefix>:{ENC}` hash: `owner` (32 hex digits), `token`, `holder` (JSON), `v`; PX ttl
//! - `<prefix>:{ENC}:fence` string: the last token minted; a long expiry is safe because the
//!   next token is at least the server's clock in microseconds anyway
//! - `<prefix>:{ENC}:origin` string: 16 hex digits, random, written by the first acquire that
//!   finds it missing and kept as long as the counter (see [`ACQUIRE`]). Added without a layout
//!   change: a client that does not know it ignores it.
//! - `<prefix>:{ENC}:gone` string: the owner ids of the last [`GONE_OWNERS`] releases, newest
//!   first, space-separated; PX [`GONE_TTL_MS`] or the operation timeout if longer (a tombstone:
//!   see below). Added without a layout change: a client that does not know it ignores it.
//! - channel `<prefix>:{ENC}:released`: a message on every release
//! - `<prefix>:{ENC}:shared` hash, with the `:leases`, `:waiters` and `:writers` sorted sets and
//!   `:gone:<owner>` tombstones: a semaphore or read-write lock ([`super::semaphore_rwlock_scripts`]); the
//!   mutex's acquire refuses while the hash exists (one name, one kind). Added without a change
//!   to the mutex's layout: an earlier client does not read it, so every client of a name is
//!   upgraded before the name is used as another kind.
//!
//! Acquire, renew and release answer a second run with the same owner id as they answered the
//! first: the Cluster client resends a request whose connection failed (`retries(2)` in
//! [`super::connect`]), and the server may have run it already (safety review finding 6). Owner
//! ids are random per acquisition and never reused, so "the same owner id" means "a replay".
//! - acquire: the lock is already this owner's: taken, with its stored token, the ttl applied
//!   again (never a ghost lock answered "held" to its own creator).
//! - renew: the owner still matches; PEXPIRE again (never a false "not ours").
//! - release: the lock is gone and the owner id is in the tombstone: released (never a false
//!   NOT_HELD or LOST). An operator's force release writes no tombstone, so the owner of a lock
//!   taken from it is still told so.
//! - acquire after release: the lock is gone and the owner id is in the tombstone: refused
//!   ([`RELEASED_BEFORE`]), never taken again. The in-flight guard of an acquire that got no
//!   answer releases by owner id; a resent acquire executed after that release would otherwise
//!   re-create a lock nobody holds a lease for, until its ttl.

use std::sync::LazyLock;

use redis::Script;

pub const LAYOUT_VERSION: &str = "1";

/// [`ACQUIRE`]'s answer to an owner id whose lock was released already: a replayed acquire.
/// Distinct from the shared kinds' codes (`super::semaphore_rwlock_scripts`), whose replies the same
/// parser reads.
pub const RELEASED_BEFORE: i64 = 5;

/// Tokens are decimal strings in every script, never Lua numbers (doubles, exact only below
/// 2^53): `gt(a, b)` compares two of them (non-negative, no leading zeros) exactly, and
/// `succ(a)` adds one, digit by digit (INCR would do it too, but would need one more command in
/// every least-privilege ACL). `adopt` is Redlock's proposal rule (docs/redlock.md, "Two rounds
/// when the quorum agrees"): the token to mint is `own` (`max(counter + 1, TIME in µs)`), or the
/// client's proposal when `own <= proposal <= TIME + cap`; the sum is exact (TIME in µs and the
/// cap are far below 2^53).
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
local function adopt(own, time, proposal, cap)
  if not proposal then return own end
  local limit = string.format('%.0f', tonumber(time) + tonumber(cap))
  if gt(own, proposal) or gt(proposal, limit) then return own end
  return proposal
end
"#;

/// A script that compares tokens: [`LUA_GT`] first.
pub(crate) fn with_gt(body: &str) -> Script {
    Script::new(&format!("{LUA_GT}{body}"))
}

/// The source of a lock script as the server runs it, by name (`acquire`, `renew`,
/// `renew_many`, `release`, `force_release`), for the tests that replay one by hand ([`crate::internals`]).
pub(crate) fn source(name: &str) -> Option<String> {
    Some(match name {
        "acquire" => format!("{LUA_GT}{ACQUIRE_LUA}"),
        "renew" => RENEW_LUA.to_string(),
        "renew_many" => RENEW_MANY_LUA.to_string(),
        "release" => release_lua(),
        "force_release" => FORCE_RELEASE_LUA.to_string(),
        _ => return None,
    })
}

/// How long a free lock's counter is kept: long, but not forever. Losing it is harmless
/// (the time floor), keeping it bounds memory for names used once.
pub const FENCE_COUNTER_TTL_MS: u64 = 30 * 24 * 3600 * 1000;

/// KEYS: lock, fence counter, and optionally the origin mark and the shared hash of the
/// other kinds. ARGV: owner, ttl ms, holder, layout version, counter ttl ms, a new origin mark
/// (16 hex digits), and from Redlock a proposed token and its cap in µs (see [`LUA_GT`]).
/// Returns `{1, token, origin}` when taken (`{1, token}` without the third key), `{0, pttl}`
/// when held (pttl -1: held with no expiry), `{5}` ([`RELEASED_BEFORE`]) when this owner's lock
/// was released already (a replay: the tombstone `<lock>:gone`, one GET when the lock is free),
/// `{2, kind}` when the name is in use as a semaphore
/// or read-write lock (the shared hash exists exactly while it has a live lease or waiter:
/// [`super::semaphore_rwlock_scripts`]; one HGET, which every ACL that ran earlier versions grants).
/// The token is `max(counter + 1, the server's TIME in µs)`. A lock that is already this
/// owner's (a replay) is taken with its stored token, and its ttl applied again: the caller's
/// deadline counts from before this run, so the key outlives it.
///
/// The origin mark is written when missing and kept as long as the counter: a server that lost
/// its data (a restart without persistence) writes a new one, and so does another server behind
/// the same address. Fences compare it (docs/design.md §3.7). Redlock's masters pass all four
/// keys too (the shared hash: a name in use as a read-write lock is refused there as here),
/// but an empty origin mark: a Redlock lease has none, so the script neither reads nor writes
/// the mark (two commands fewer per master per acquire).
pub static ACQUIRE: LazyLock<Script> = LazyLock::new(|| with_gt(ACQUIRE_LUA));
const ACQUIRE_LUA: &str = r#"
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    local token = redis.call('HGET', KEYS[1], 'token')
    if KEYS[3] and ARGV[6] ~= '' then return {1, token, redis.call('GET', KEYS[3])} end
    return {1, token}
  end
  return {0, pttl}
end
local gone = redis.call('GET', KEYS[1] .. ':gone')
if gone then
  for owner in string.gmatch(gone, '%S+') do
    if owner == ARGV[1] then return {5} end
  end
end
if KEYS[4] then
  local kind = redis.call('HGET', KEYS[4], 'kind')
  if kind then return {2, kind} end
end
local now = redis.call('TIME')
local floor = now[1] .. string.format('%06d', tonumber(now[2]))
local t = succ(redis.call('GET', KEYS[2]) or '0')
if gt(floor, t) then t = floor end
t = adopt(t, floor, ARGV[7], ARGV[8])
redis.call('SET', KEYS[2], t, 'PX', ARGV[5])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', t, 'holder', ARGV[3], 'v', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if not KEYS[3] or ARGV[6] == '' then return {1, t} end
local origin = redis.call('GET', KEYS[3]) or ARGV[6]
redis.call('SET', KEYS[3], origin, 'PX', ARGV[5])
return {1, t, origin}
"#;

/// KEYS: lock. ARGV: owner, ttl ms. Never re-creates an expired lock. A replay finds the owner
/// unchanged and answers renewed again.
pub static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));
const RENEW_LUA: &str = r#"
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

/// KEYS: locks. ARGV: per lock, its owner then its ttl ms. Answers one 1 (renewed) or 0 per
/// lock, in order: [`RENEW`] for each, in one script, so a Locker's leases that came due
/// together renew in one request. A replay answers as the first run did.
pub static RENEW_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_MANY_LUA));
const RENEW_MANY_LUA: &str = r#"
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.call('HGET', key, 'owner') == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
"#;

/// How many owner ids the tombstone (`<lock>:gone`) keeps: a replay of a release is still
/// recognised after this many later releases of the same lock by others.
pub const GONE_OWNERS: usize = 8;

/// How long the tombstone is kept at least: a replay comes within the caller's operation
/// timeout, so the backend passes the longer of the two.
pub const GONE_TTL_MS: u64 = 60_000;

/// KEYS: lock, tombstone. ARGV: owner, release channel, publish command (PUBLISH or SPUBLISH),
/// tombstone ttl ms. Returns 1 released (now, or by an earlier run for the same owner: its id is
/// in the tombstone), 0 not this owner's lock. Redlock's masters call it with the lock key and
/// the first three arguments only: the tombstone is then `KEYS[1]:gone`, kept [`GONE_TTL_MS`].
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(&release_lua()));
fn release_lua() -> String {
    format!(
        r#"
local gone = KEYS[2] or (KEYS[1] .. ':gone')
local recent = redis.call('GET', gone) or ''
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local kept = {{ARGV[1]}}
  for owner in string.gmatch(recent, '%S+') do
    if #kept == {GONE_OWNERS} then break end
    kept[#kept + 1] = owner
  end
  redis.call('SET', gone, table.concat(kept, ' '), 'PX', ARGV[4] or '{GONE_TTL_MS}')
  redis.call(ARGV[3], ARGV[2], 'released')
  return 1
end
for owner in string.gmatch(recent, '%S+') do
  if owner == ARGV[1] then return 1 end
end
return 0
"#
    )
}

/// An operator's release, whoever holds the lock. KEYS: lock. ARGV: release channel, publish
/// command. The fence counter is not touched: the next token still exceeds every earlier one.
/// No tombstone: the holder's own release afterwards answers "not held", as it should. Only the
/// tests replay it now: every backend force-releases with the shared kinds' `FORCE_RELEASE_ANY`,
/// which does this for a mutex.
#[cfg(test)]
pub static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(FORCE_RELEASE_LUA));
const FORCE_RELEASE_LUA: &str = r#"
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call(ARGV[2], ARGV[1], 'released')
  return 1
end
return 0
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sources_for_tests_are_the_scripts_that_run() {
        for (name, script) in [
            ("acquire", &*ACQUIRE),
            ("renew", &*RENEW),
            ("renew_many", &*RENEW_MANY),
            ("release", &*RELEASE),
            ("force_release", &*FORCE_RELEASE),
        ] {
            let source = source(name).unwrap();
            assert_eq!(Script::new(&source).get_hash(), script.get_hash(), "{name}");
        }
        assert_eq!(source("inspect"), None);
    }
}
