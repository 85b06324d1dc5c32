-- Renew many locks on one node in a single call (the watchdog's batch).
--
-- KEYS  pairs: lock hash, fence counter, for each lock in the batch
-- ARGV  quadruples, one per lock: owner id, authoritative hold count,
--       fencing token, lease in milliseconds
--
-- Returns one code per lock:
--   1 extended: our owner held it; count converged, lease refreshed;
--   2 repaired: the key was missing (node restarted empty or lost it), so it is
--     re-created for our owner with the authoritative count, and the fence
--     counter is raised to the token (the node may have lost it too);
--   0 conflict: another owner holds it; nothing is changed;
--  -2 error: the key holds a value of the wrong type.
--
-- The common path costs two calls per lock: HGET and PEXPIRE.
local out = {}
for i = 1, #KEYS / 2 do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, count = ARGV[4 * i - 3], ARGV[4 * i - 2]
  local token, lease = tonumber(ARGV[4 * i - 1]), ARGV[4 * i]
  local held = redis.pcall('hget', lock, owner)
  if type(held) == 'table' then
    out[i] = -2
  elseif held then
    if held ~= count then
      redis.call('hset', lock, owner, count)
    end
    redis.call('pexpire', lock, lease)
    out[i] = 1
  elseif redis.call('exists', lock) == 0 then
    redis.call('hset', lock, owner, count)
    redis.call('pexpire', lock, lease)
    local f = redis.pcall('get', fence)
    if type(f) ~= 'table' and token > 0 and tonumber(f or '0') < token then
      redis.call('set', fence, token)
    end
    out[i] = 2
  else
    out[i] = 0
  end
end
return out
