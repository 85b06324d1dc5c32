-- Keep waiters' places in their locks' queues while the locks are held (a
-- manager's batch of place refreshes, in place of one queued attempt per
-- waiter on every node; see `Members::keep_place`).
--
-- KEYS  three per waiter: the lock hash <prefix>{name}, its queue
--       <prefix>{name}:queue and its timeouts <prefix>{name}:timeouts;
--       read as K[ko + i], nk of them, bound by the prelude
-- ARGV  pairs, one per waiter: waiter id, queue timeout in milliseconds;
--       read as A[ao + i]
--
-- Returns one code per waiter:
--   16 + the lock's PTTL in milliseconds, kept: the lock is held (by
--     anyone), the waiter is queued, and its deadline is now + timeout (the
--     queue's keys live at least as long: when they would not, they are
--     given twice that, so that the next keeps of the queue's waiters need
--     not extend them again). The PTTL tells the waiter when the holder's
--     key expires unless renewed, so that it attempts then, not at an
--     expiry it saw before a renewal;
--   1 kept, the lock's key having no TTL;
--   3 free: no lock key; nothing is written (the waiter attempts: it may
--     take the lock, and its attempt keeps its place);
--   0 not queued: the lock is held but the waiter has no place here (it
--     lapsed, or never landed); nothing is written (its attempt queues it);
--  -2 error: a key holds a value of the wrong type;
--   4 not here (only as a cluster member sends it per shard, after
--     shard_prelude.lua): the lock's slot is not served by this node.
-- The keys are read before anything is written, and an extension never
-- creates a place: ZADD XX only moves a deadline that is there, so a keep
-- that lands after the waiter left (or won) changes nothing.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, nk / 3 do
  local k = ko + 3 * i
  local lock, queue, timeouts = K[k - 2], K[k - 1], K[k]
  local a = ao + 2 * i
  local waiter, timeout = A[a - 1], tonumber(A[a])
  local at = redis.pcall('zscore', timeouts, waiter)
  local pttl = redis.pcall('pttl', lock)
  if type(at) == 'table' then
    out[i] = hget_error(at)
  elseif type(pttl) == 'table' then
    out[i] = hget_error(pttl)
  elseif pttl == -2 then
    out[i] = 3
  elseif not at then
    out[i] = 0
  else
    redis.call('zadd', timeouts, 'XX', now + timeout, waiter)
    if redis.call('pttl', timeouts) < timeout then
      redis.call('pexpire', timeouts, 2 * timeout)
      redis.call('pexpire', queue, 2 * timeout)
    end
    if pttl >= 0 then
      out[i] = 16 + pttl
    else
      out[i] = 1
    end
  end
end
return out
