-- Reentrant acquire (Redisson's hash-per-lock design, with an authoritative count).
--
-- KEYS[1] lock hash   <prefix>{name}
-- KEYS[2] fence       <prefix>fence:{tag}, the fence counter of the lock's slot
-- ARGV[1] holder id
-- ARGV[2] lease in milliseconds
-- ARGV[3] hold count the client wants this node to carry (authoritative)
-- ARGV[4] '1' for a re-entry: a missing key is reported, never created (a
--         lock forced or lost on this node stays gone; see `reenter`)
--
-- Returns {1, token}  the lock was free: granted, and the fence counter was INCRed;
--         {2, fence}  our holder already holds it: the count is set to ARGV[3] (re-entry);
--         {0, pttl}   another holder holds it; pttl is its remaining time in ms;
--         {3, 0}      re-entry only: the key is missing; nothing is written.
-- A lock key that is not a hash, or a fence counter that is not a string,
-- raises WRONGTYPE, which the caller reports as such. The counter is read
-- (or INCRed) before anything is written: a script stopped by an error keeps
-- the writes it made, and an error reply must not leave a grant behind.
local pttl = redis.call('pttl', KEYS[1])
if pttl == -2 then
  if ARGV[4] == '1' then
    return {3, 0}
  end
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  local fence = tonumber(redis.call('get', KEYS[2]) or '0')
  redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {2, fence}
end
return {0, pttl}
