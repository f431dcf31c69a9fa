//! The Lua scripts of the Redis fence (docs/redis.md): [`FENCED_SET`], the check and the write in
//! one atomic step, and [`FENCE_CHECK`], the check alone. Tokens are compared as decimal strings
//! with the lock scripts' `gt` ([`crate::backend::redis::mutex_scripts::with_gt`]).
//!
//! The fence record, `<prefix>:{ENC}` with ENC the resource's encoded name, is a hash: `token`
//! (the highest token accepted), `lock` (the lock the tokens are from) and `origins` (see
//! `fence::origins`).

use std::sync::LazyLock;

use redis::Script;

use crate::backend::redis::mutex_scripts::with_gt;

/// The fence (docs/redis.md). KEYS: fence record, data key. ARGV: token, lock key, value, the
/// token's origin mark ('' when it has none), then the lock's aliases: a record under one of
/// them is the same lock, and moves to the lock key. Returns `{verdict, origins, highest}`:
/// verdict 1 written, 0 stale, -1 another lock; the record's origins and highest token as they
/// were before, for the client to judge the origin by (`fence::origins`, whose rule the update
/// of `origins` here follows).
pub(super) static FENCED_SET: LazyLock<Script> = LazyLock::new(|| {
    with_gt(&format!(
        r#"
local lock = redis.call('HGET', KEYS[1], 'lock')
local alias = false
if lock and ARGV[2] ~= '' and lock ~= ARGV[2] then
  for i = 5, #ARGV do
    if lock == ARGV[i] then alias = true end
  end
  if not alias then return {{-1, '', ''}} end
end
local highest = redis.call('HGET', KEYS[1], 'token')
local origins = redis.call('HGET', KEYS[1], 'origins') or ''
if highest and gt(highest, ARGV[1]) then return {{0, origins, highest}} end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
if (alias or not lock) and ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'lock', ARGV[2]) end
local origin = ARGV[4]
if origin ~= '' then
  local current = string.sub(origins, 1, 16)
  if origins == '' then
    redis.call('HSET', KEYS[1], 'origins', origin)
  elseif current ~= origin and not string.find(origins, ' ' .. origin .. '@', 1, true)
      and (not highest or gt(ARGV[1], highest)) then
    local kept = {{origin, current .. '@' .. ARGV[1]}}
    for word in string.gmatch(string.sub(origins, 18), '%S+') do
      if #kept == {kept} then break end
      kept[#kept + 1] = word
    end
    redis.call('HSET', KEYS[1], 'origins', table.concat(kept, ' '))
  end
end
redis.call('SET', KEYS[2], ARGV[3])
return {{1, origins, highest or ''}}
"#,
        kept = crate::fence::RETIRED_ORIGINS_KEPT + 1
    ))
});

/// KEYS: fence record. ARGV: token, lock key, then the lock's aliases (identities a record may
/// hold from before). Returns `{verdict, origins, highest}`: 1 acceptable, 0 stale, -1 another
/// lock, with the record's origins and highest token.
pub(super) static FENCE_CHECK: LazyLock<Script> = LazyLock::new(|| {
    with_gt(
        r#"
local lock = redis.call('HGET', KEYS[1], 'lock')
if lock and ARGV[2] ~= '' and lock ~= ARGV[2] then
  local alias = false
  for i = 3, #ARGV do
    if lock == ARGV[i] then alias = true end
  end
  if not alias then return {-1, '', ''} end
end
local highest = redis.call('HGET', KEYS[1], 'token')
local origins = redis.call('HGET', KEYS[1], 'origins') or ''
if highest and gt(highest, ARGV[1]) then return {0, origins, highest} end
return {1, origins, highest or ''}
"#,
    )
});
