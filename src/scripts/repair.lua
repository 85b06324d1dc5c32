-- Re-create locks that a node lost, for holds that a quorum of other nodes
-- confirmed in the same watchdog tick (the watchdog's repair batch).
--
-- KEYS  pairs, one per lock: the lock hash <prefix>{name}, then the fence
--       counter of its slot <prefix>fence:{tag} (locks of one slot share
--       it); read as K[ko + i], nk of them, bound by the prelude
-- ARGV  quadruples, one per lock: holder id, authoritative hold count,
--       fencing token, lease in milliseconds; read as A[ao + i]
--
-- Returns one code per lock:
--   2 repaired: the key was missing and is re-created for our holder; its
--     fence counter is raised to the token (the node may have lost it too);
--   1 extended: our holder already held it again;
--   0 conflict: another holder took it meanwhile; nothing is changed;
--  -2 error: the key or its counter holds a value of the wrong type;
--   4 not here (only as a cluster member sends it per shard, after
--     shard_prelude.lua): the lock's slot is not served by this node.
-- Each counter is read before anything is written for a lock that needs
-- it: a counter of the wrong type (or not a number) fails the locks that
-- would need it, and nothing is created for them, rather than an error
-- after some keys were. Counters are raised once, at the end.
local out = {}
local counters, raises, order = {}, {}, {}
local function counter(fence)
  if counters[fence] == nil then
    local f = redis.pcall('get', fence)
    if type(f) == 'table' or tonumber(f or '0') == nil then
      counters[fence] = false
    else
      counters[fence] = tonumber(f or '0')
      raises[fence] = 0
      order[#order + 1] = fence
    end
  end
  return counters[fence]
end
for i = 1, nk / 2 do
  local lock, fence = K[ko + 2 * i - 1], K[ko + 2 * i]
  local a = ao + 4 * i
  local holder, count = A[a - 3], A[a - 2]
  local token, lease = tonumber(A[a - 1]), A[a]
  local held = redis.pcall('hget', lock, holder)
  if type(held) == 'table' then
    out[i] = hget_error(held)
  elseif held then
    redis.call('hset', lock, holder, count)
    redis.call('pexpire', lock, lease)
    out[i] = 1
  elseif redis.call('exists', lock) == 1 then
    out[i] = 0
  elseif counter(fence) == false then
    out[i] = -2
  else
    redis.call('hset', lock, holder, count)
    redis.call('pexpire', lock, lease)
    if token > raises[fence] then
      raises[fence] = token
    end
    out[i] = 2
  end
end
for _, fence in ipairs(order) do
  if raises[fence] > counters[fence] then
    redis.call('set', fence, raises[fence])
  end
end
return out
