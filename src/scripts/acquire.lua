-- Reentrant acquire (Redisson's hash-per-lock design, with an authoritative count).
--
-- KEYS[1] lock hash   <prefix>{name}
-- KEYS[2] fence       <prefix>fence, the node's one fence counter for all locks
-- ARGV[1] holder id
-- ARGV[2] lease in milliseconds
-- ARGV[3] hold count the client wants this node to carry (authoritative)
--
-- Returns {1, token}  the lock was free: granted, and the fence counter was INCRed;
--         {2, fence}  our holder already holds it: the count is set to ARGV[3] (re-entry);
--         {0, pttl}   another holder holds it; pttl is its remaining time in ms.
-- A lock key that is not a hash raises WRONGTYPE, which the caller reports as such.
local pttl = redis.call('pttl', KEYS[1])
if pttl == -2 then
  redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, redis.call('incr', KEYS[2])}
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {2, tonumber(redis.call('get', KEYS[2]) or '0')}
end
return {0, pttl}
