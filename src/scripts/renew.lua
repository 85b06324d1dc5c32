-- Renew many locks on one node in a single call (the watchdog's batch).
--
-- KEYS  the lock hashes, one per lock in the batch; read as K[ko + i], nk
--       of them, bound by the prelude
-- ARGV  triples, one per lock: holder id, authoritative hold count, lease in
--       milliseconds; read as A[ao + i]
--
-- Returns one code per lock:
--   1 extended: our holder held it; count converged, lease refreshed;
--   3 missing: no key (expired, forced, or the node restarted empty); nothing
--     is created here: the watchdog repairs a missing key only while a quorum
--     of other nodes confirmed the hold (see repair.lua);
--   0 conflict: another holder holds it; nothing is changed;
--  -2 error: the key holds a value of the wrong type;
--   4 not here (only as a cluster member sends it per shard, after
--     shard_prelude.lua): the lock's slot is not served by this node.
-- (`hget_error`, from the prelude, tells -2 from 4.)
--
-- The common path costs two calls per lock: HGET and PEXPIRE.
local out = {}
for i = 1, nk do
  local lock = K[ko + i]
  local a = ao + 3 * i
  local holder, count, lease = A[a - 2], A[a - 1], A[a]
  local held = redis.pcall('hget', lock, holder)
  if type(held) == 'table' then
    out[i] = hget_error(held)
  elseif held then
    if held ~= count then
      redis.call('hset', lock, holder, count)
    end
    redis.call('pexpire', lock, lease)
    out[i] = 1
  elseif redis.call('exists', lock) == 0 then
    out[i] = 3
  else
    out[i] = 0
  end
end
return out
