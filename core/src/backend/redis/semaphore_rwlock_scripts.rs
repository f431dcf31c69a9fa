//! The Lua scripts of semaphores and read-write locks on one Redis instance or a Cluster (the
//! "shared" kinds: several leases of one name at once). Each runs atomically, in one round trip,
//! on keys that all carry the name's hash tag `{ENC}` and are all passed in KEYS (a Cluster runs
//! a script on the master of its keys' slot, which may not hold a key of another slot), and
//! publishes on the name's channel, which carries the tag too (on a Cluster, SPUBLISH reaches
//! the waiters subscribed to that slot's shard).
//!
//! Stored layout (version [`SHARED_LAYOUT_VERSION`], the `v` field):
//! - `<prefix>:{ENC}:shared` hash: `v`, `kind` (`semaphore` or `read-write lock`), `permits`
//!   (a semaphore's N; 0 for a read-write lock), and one field per entry: `l:<owner>` =
//!   `<mode> <token> <holder>` for a lease, `w:<owner>` = `<mode> <holder>` for a registered
//!   waiter (owner: 32 hex digits; mode: `permit`, `read` or `write`; holder: the JSON
//!   description).
//! - `<prefix>:{ENC}:leases` sorted set: owner -> expiry (ms, the server's clock).
//! - `<prefix>:{ENC}:waiters` sorted set: owner -> expiry of every registered waiter, and
//!   `<prefix>:{ENC}:writers` the write waiters among them (so "a writer waits" is one lookup).
//!   An attempt that answers "held" registers its owner until ttl from now (each attempt
//!   refreshes it), so a crashed waiter lapses like a crashed holder's lease.
//! - all four expire with the latest entry (PX), and go when the last entry goes: the hash
//!   exists exactly while the name has a live lease or waiter, and the mutex's acquire checks
//!   that with one HGET of `kind`, a command every ACL that ran earlier versions grants.
//! - `<prefix>:{ENC}:gone:<owner>` string, PX the tombstone ttl: the release of that owner's
//!   lease, for a replayed release (one key per release: a burst of releases by many readers
//!   cannot push a replay's owner out of a bounded list, as it could the mutex's `:gone`).
//! - the mutex's counter `<prefix>:{ENC}:fence` and origin mark `<prefix>:{ENC}:origin`: every
//!   mode of one name mints from the one counter, `max(counter + 1, TIME in µs)`, so a permit's
//!   token exceeds every earlier permit's and a write lease's every earlier lease's.
//! - the mutex's release channel `<prefix>:{ENC}:released`: one `watch(name)` wakes waiters of
//!   every mode.
//!
//! Why sorted sets: every operation is O(log n) in the holders and waiters of the name, and
//! writes (to the AOF and the replicas) only its own entry, up to the 10,000 permits a semaphore
//! may have. Keeping every entry in one string would have needed no command beyond the mutex's
//! least-privilege ACL, but measured 39 ms per acquire and 1.4 MB written per renewal at 10,000
//! holders (3 ms and 140 kB at 1,000). The ACL for the new kinds therefore grows by the sorted
//! set commands and HDEL (docs/redis.md); the mutex needs nothing new.
//!
//! Every script first drops expired entries. Replays (the Cluster client resending a request
//! whose reply was lost, or the `fault-injection-duplicate-scripts` test build) are answered as
//! the first run was: an acquire whose owner already holds a lease gets that lease's token back
//! with its ttl applied again (never a second permit); a renewal finds its entry again; a
//! release finds its tombstone.
//!
//! One name, one kind: these scripts refuse while the name's mutex key exists, and the mutex's
//! acquire refuses while the shared hash exists ([`super::mutex_scripts::ACQUIRE`]).

use std::sync::LazyLock;

use redis::Script;

use super::mutex_scripts::LUA_GT;

/// The `v` of the shared hash. A hash with a larger `v` was written by a newer fencelock and is
/// refused, not misread.
pub const SHARED_LAYOUT_VERSION: &str = "1";

/// Reply codes of the acquire scripts (first element) other than taken (1) and held (0).
/// `{KIND_CONFLICT, found kind}` is also answered by the mutex's acquire.
pub const KIND_CONFLICT: i64 = 2;
/// `{PERMITS_CONFLICT, stored permits}`.
pub const PERMITS_CONFLICT: i64 = 3;
/// `{NEWER_LAYOUT, stored version}`.
pub const NEWER_LAYOUT: i64 = 4;

/// What every shared script starts with. KEYS[1..4] are always the shared hash, the leases,
/// the waiters and the write waiters; `now` is the server's clock in ms (exact as a Lua
/// number), `clock` its TIME reply.
const PRELUDE: &str = r#"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local shared, leases, waiters, writers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function ms(n) return string.format('%.0f', n) end
-- Drops the entries whose expiry has passed: crashed holders and waiters.
local function prune()
  for _, set in ipairs({{leases, 'l:'}, {waiters, 'w:'}}) do
    local expired = redis.call('ZRANGEBYSCORE', set[1], '-inf', ms(now))
    for _, owner in ipairs(expired) do redis.call('HDEL', shared, set[2] .. owner) end
    if #expired > 0 then redis.call('ZREMRANGEBYSCORE', set[1], '-inf', ms(now)) end
  end
  redis.call('ZREMRANGEBYSCORE', writers, '-inf', ms(now))
end
-- The soonest expiry in a set (nil when empty).
local function soonest(set)
  return tonumber(redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')[2])
end
-- Every key of the name expires with its latest entry, or goes now.
local function settle()
  local last = nil
  for _, set in ipairs({leases, waiters}) do
    local e = tonumber(redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')[2])
    if e and (not last or e > last) then last = e end
  end
  if not last then
    redis.call('DEL', shared, leases, waiters, writers)
    return
  end
  for _, key in ipairs({shared, leases, waiters, writers}) do
    redis.call('PEXPIRE', key, ms(last - now))
  end
end
-- Removes owner's waiter registration; true when it was a writer's.
local function unregister(owner)
  redis.call('ZREM', waiters, owner)
  redis.call('HDEL', shared, 'w:' .. owner)
  return redis.call('ZREM', writers, owner) == 1
end
"#;

fn with_prelude(body: &str) -> String {
    format!("{LUA_GT}{PRELUDE}{body}")
}

/// KEYS: shared hash, leases, waiters, writers, counter, origin mark, the mutex's lock key.
/// ARGV: owner, mode, kind, permits (0 for a read-write lock), ttl ms, holder, layout version,
/// counter ttl ms, a new origin mark, and from Redlock a proposed token and its cap in µs (the
/// rule of `mutex_scripts::LUA_GT`'s `adopt`).
///
/// Answers `{1, token, origin}` taken, `{0, ms}` held (the soonest expiry among what blocks
/// the request: the moment to retry at the latest), or one of the refusals above. An attempt
/// that answers held registers (or refreshes) its owner as a waiter until ttl from now; a
/// taken one removes its registration. A permit is taken while fewer than N leases live; a
/// read lease while no write lease lives and no writer waits; a write lease while no lease
/// lives (a write lease is always alone, so the first lease tells whether one is held).
pub static SHARED_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_prelude(ACQUIRE_LUA)));
const ACQUIRE_LUA: &str = r#"
if redis.call('PTTL', KEYS[7]) ~= -2 then return {2, 'mutex'} end
local version = redis.call('HGET', shared, 'v')
if version and (tonumber(version) or math.huge) > tonumber(ARGV[7]) then
  return {4, version}
end
local owner, mode, kind, permits = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local expiry = ms(now + tonumber(ARGV[5]))
prune()
local held = redis.call('ZCARD', leases)
if held + redis.call('ZCARD', waiters) > 0 then
  local found = redis.call('HGET', shared, 'kind') or 'unknown'
  if found ~= kind then return {2, found} end
  local stored = tonumber(redis.call('HGET', shared, 'permits')) or 0
  if stored ~= permits then return {3, stored} end
end
if redis.call('ZSCORE', leases, owner) then
  redis.call('ZADD', leases, expiry, owner)
  unregister(owner)
  settle()
  local token = string.match(redis.call('HGET', shared, 'l:' .. owner) or '', '^%l+ (%d+)')
  return {1, token, redis.call('GET', KEYS[6])}
end
local retry_at = nil
if mode == 'permit' then
  if held >= permits then retry_at = soonest(leases) end
elseif mode == 'read' then
  if held > 0 then
    local first = redis.call('ZRANGE', leases, 0, 0)[1]
    local entry = redis.call('HGET', shared, 'l:' .. first) or ''
    if string.sub(entry, 1, 6) == 'write ' then retry_at = soonest(leases) end
  end
  local writer = soonest(writers)
  if writer and (not retry_at or writer < retry_at) then retry_at = writer end
elseif held > 0 then
  retry_at = soonest(leases)
end
redis.call('HSET', shared, 'v', ARGV[7], 'kind', kind, 'permits', ARGV[4])
if retry_at then
  redis.call('ZADD', waiters, expiry, owner)
  if mode == 'write' then redis.call('ZADD', writers, expiry, owner) end
  redis.call('HSET', shared, 'w:' .. owner, mode .. ' ' .. ARGV[6])
  settle()
  return {0, retry_at - now}
end
unregister(owner)
local token = succ(redis.call('GET', KEYS[5]) or '0')
local floor = clock[1] .. string.format('%06d', tonumber(clock[2]))
if gt(floor, token) then token = floor end
token = adopt(token, floor, ARGV[10], ARGV[11])
redis.call('SET', KEYS[5], token, 'PX', ARGV[8])
local origin = redis.call('GET', KEYS[6]) or ARGV[9]
redis.call('SET', KEYS[6], origin, 'PX', ARGV[8])
redis.call('ZADD', leases, expiry, owner)
redis.call('HSET', shared, 'l:' .. owner, mode .. ' ' .. token .. ' ' .. ARGV[6])
settle()
return {1, token, origin}
"#;

/// KEYS: shared hash, leases, waiters, writers. ARGV: owner, ttl ms. Answers 1 renewed, 0 not
/// a live lease of this owner (an expired lease is never revived).
pub static SHARED_RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(&with_prelude(RENEW_LUA)));
const RENEW_LUA: &str = r#"
local expiry = tonumber(redis.call('ZSCORE', leases, ARGV[1]) or '0')
if expiry <= now then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', leases, ms(now + ttl), ARGV[1])
for _, key in ipairs({shared, leases, waiters, writers}) do
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ARGV[2]) end
end
return 1
"#;

/// KEYS: shared hash, leases, waiters, writers, the owner's tombstone. ARGV: owner, release
/// channel, publish command, tombstone ttl ms. Removes the owner's lease and its waiter
/// registration (the clean-up of an attempt whose outcome was unknown may find either).
/// Answers 1 released (now, or by an earlier run: the tombstone), 0 not a live lease of this
/// owner. Publishes on a release, and when a waiting writer left (readers queued behind it may
/// go).
pub static SHARED_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_prelude(RELEASE_LUA)));
const RELEASE_LUA: &str = r#"
prune()
local mine = redis.call('ZREM', leases, ARGV[1]) == 1
redis.call('HDEL', shared, 'l:' .. ARGV[1])
local writer = unregister(ARGV[1])
settle()
if mine or writer then redis.call(ARGV[3], ARGV[2], 'released') end
if mine then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[4])
  return 1
end
if redis.call('GET', KEYS[5]) then return 1 end
return 0
"#;

/// KEYS: shared hash, leases, waiters, writers. ARGV: owner, release channel, publish command.
/// Removes the owner's waiter registration (a waiter that gave up); publishes when it was a
/// writer's, so the readers queued behind it retry at once.
pub static SHARED_ABANDON: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_prelude(ABANDON_LUA)));
const ABANDON_LUA: &str = r#"
prune()
local writer = unregister(ARGV[1])
settle()
if writer then redis.call(ARGV[3], ARGV[2], 'released') end
return 1
"#;

/// Redlock's fencing phase 2 for a shared lease (the mutex's is `redlock::mutex_scripts::RAISE`).
/// KEYS: shared hash, leases, waiters, writers, counter. ARGV: owner, T, counter ttl ms. If the
/// owner's lease is live, raises the counter to at least T and records T as the lease's token;
/// answers 1. Answers 0 (and writes nothing) when it is not.
pub static SHARED_RAISE: LazyLock<Script> = LazyLock::new(|| Script::new(&with_prelude(RAISE_LUA)));
const RAISE_LUA: &str = r#"
if tonumber(redis.call('ZSCORE', leases, ARGV[1]) or '0') <= now then return 0 end
local entry = redis.call('HGET', shared, 'l:' .. ARGV[1])
local mode, described = string.match(entry or '', '^(%l+) %d+ (.*)$')
if not mode then return 0 end
local counter = redis.call('GET', KEYS[5])
if (not counter) or gt(ARGV[2], counter) then
  redis.call('SET', KEYS[5], ARGV[2], 'PX', ARGV[3])
end
redis.call('HSET', shared, 'l:' .. ARGV[1], mode .. ' ' .. ARGV[2] .. ' ' .. described)
return 1
"#;

/// Redlock's giving back of the grants of an attempt that did not win a majority, keeping its
/// place: the owner's lease on this master (if any) becomes a waiter registration until ttl
/// from now, as a `held` answer would have left it, so a writer that lost a split vote still
/// holds back the readers that arrive after it. KEYS: shared hash, leases, waiters, writers.
/// ARGV: owner, mode, holder, ttl ms, release channel, publish command. Answers 1.
pub static SHARED_STEP_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_prelude(STEP_BACK_LUA)));
const STEP_BACK_LUA: &str = r#"
prune()
local mine = redis.call('ZREM', leases, ARGV[1]) == 1
redis.call('HDEL', shared, 'l:' .. ARGV[1])
if mine or redis.call('ZSCORE', waiters, ARGV[1]) then
  local expiry = ms(now + tonumber(ARGV[4]))
  redis.call('ZADD', waiters, expiry, ARGV[1])
  if ARGV[2] == 'write' then redis.call('ZADD', writers, expiry, ARGV[1]) end
  redis.call('HSET', shared, 'w:' .. ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
end
settle()
if mine then redis.call(ARGV[6], ARGV[5], 'released') end
return 1
"#;

/// An operator's release of a name whatever its kind. KEYS: shared hash, leases, waiters,
/// writers, the mutex's lock key. ARGV: release channel, publish command. Deletes them all (the
/// counter stays: later tokens still exceed every earlier one) and publishes; no tombstone, so
/// holders learn they lost it. Answers 1 when a mutex or a lease was held. Calls no sorted set
/// command unless the shared hash exists, so a user granted only the mutex's commands can force
/// release mutexes (as [`INSPECT_ANY`] inspects them).
pub static FORCE_RELEASE_ANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_prelude(FORCE_RELEASE_LUA)));
const FORCE_RELEASE_LUA: &str = r#"
local held = redis.call('PTTL', KEYS[5]) ~= -2
if not held and redis.call('PTTL', shared) ~= -2 then
  held = #redis.call('ZRANGEBYSCORE', leases, '(' .. ms(now), '+inf', 'LIMIT', 0, 1) > 0
end
if redis.call('DEL', KEYS[5], shared, leases, waiters, writers) == 0 then return 0 end
redis.call(ARGV[2], ARGV[1], 'released')
if held then return 1 end
return 0
"#;

/// Reads a name whatever its kind. KEYS: shared hash, leases, waiters, writers, the mutex's
/// lock key, counter. ARGV: the most waiters to list. Answers `{pttl, token, holder, counter,
/// kind, permits, leases, waiters}`: the mutex's PTTL (-2 when free), token and holder; the
/// last token minted; and for the other kinds (false when the name is not in use as one) the
/// kind, N, every live lease as `{mode, token, ms left, holder, owner}` and the waiters that
/// lapse first as `{mode, ms left, holder, owner}` (Redlock counts a lease or a waiter by its
/// owner on a majority of masters). Writes nothing.
pub static INSPECT_ANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_prelude(INSPECT_LUA)));
const INSPECT_LUA: &str = r#"
local pttl = redis.call('PTTL', KEYS[5])
local token, holder = false, false
if pttl ~= -2 then
  token = redis.call('HGET', KEYS[5], 'token')
  holder = redis.call('HGET', KEYS[5], 'holder')
end
local kind, permits, listed, queued = false, false, {}, {}
if redis.call('PTTL', shared) ~= -2 then
  kind = redis.call('HGET', shared, 'kind')
  permits = redis.call('HGET', shared, 'permits')
  local live = redis.call('ZRANGEBYSCORE', leases, '(' .. ms(now), '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    local entry = redis.call('HGET', shared, 'l:' .. live[i]) or ''
    local mode, token, described = string.match(entry, '^(%l+) (%d+) (.*)$')
    if mode then
      listed[#listed + 1] = {mode, token, tonumber(live[i + 1]) - now, described, live[i]}
    end
  end
  local waiting = redis.call('ZRANGEBYSCORE', waiters, '(' .. ms(now), '+inf', 'WITHSCORES',
    'LIMIT', 0, tonumber(ARGV[1]))
  for i = 1, #waiting, 2 do
    local entry = redis.call('HGET', shared, 'w:' .. waiting[i]) or ''
    local mode, described = string.match(entry, '^(%l+) (.*)$')
    if mode then
      queued[#queued + 1] = {mode, tonumber(waiting[i + 1]) - now, described, waiting[i]}
    end
  end
end
return {pttl, token, holder, redis.call('GET', KEYS[6]), kind, permits, listed, queued}
"#;

/// Every script above, for loading at connect.
pub fn all() -> [&'static Script; 6] {
    [
        &SHARED_ACQUIRE,
        &SHARED_RENEW,
        &SHARED_RELEASE,
        &SHARED_ABANDON,
        &FORCE_RELEASE_ANY,
        &INSPECT_ANY,
    ]
}

/// The commands the scripts call, as the ACL of docs/redis.md must grant them (the publish
/// command comes from the caller: PUBLISH or SPUBLISH).
#[cfg(test)]
const COMMANDS: &[&str] = &[
    "TIME",
    "PTTL",
    "GET",
    "SET",
    "DEL",
    "PEXPIRE",
    "HGET",
    "HSET",
    "HDEL",
    "ZADD",
    "ZREM",
    "ZSCORE",
    "ZCARD",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREMRANGEBYSCORE",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_distinct() {
        let scripts: Vec<&Script> = all()
            .into_iter()
            .chain([&*SHARED_RAISE, &*SHARED_STEP_BACK])
            .collect();
        let hashes: std::collections::HashSet<String> =
            scripts.iter().map(|s| s.get_hash().to_string()).collect();
        assert_eq!(hashes.len(), scripts.len());
    }

    #[test]
    fn the_scripts_call_only_what_the_documented_acl_grants() {
        let docs = include_str!("../../../../docs/redis.md");
        for command in COMMANDS {
            let granted = format!("+{}", command.to_lowercase());
            assert!(
                docs.contains(&granted),
                "docs/redis.md's ACL lacks {granted}"
            );
        }
        for body in [
            ACQUIRE_LUA,
            RENEW_LUA,
            RELEASE_LUA,
            ABANDON_LUA,
            FORCE_RELEASE_LUA,
            INSPECT_LUA,
            RAISE_LUA,
            STEP_BACK_LUA,
        ] {
            let source = with_prelude(body);
            for call in source.split("redis.call(").skip(1) {
                let called = call.split([',', ')']).next().unwrap_or_default();
                let command = called.trim_matches('\'');
                assert!(
                    COMMANDS.contains(&command) || called.starts_with("ARGV["),
                    "{called} is not among the commands docs/redis.md grants"
                );
            }
        }
    }
}
