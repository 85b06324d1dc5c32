-- Acquire several locks at once, all or none (the multi-lock's acquire).
--
-- KEYS[1..n] the lock hashes   <prefix>{name}, one per name of the set
-- KEYS[n+1]  fence             <prefix>fence, the node's one fence counter
-- ARGV[1] holder id
-- ARGV[2] lease in milliseconds
-- ARGV[3] hold count the client wants this node to carry on every name
--
-- Returns {1, token}  no name was held by another holder, and at least one
--                     was free: every name is now ours with the count, and
--                     the fence counter was INCRed once for the whole set;
--         {2, fence}  every name was already ours: counts set (re-entry);
--         {0, pttl}   another holder holds at least one name; pttl is the
--                     largest remaining time among those (-1: one of them
--                     has no TTL); nothing is written.
-- Everything is read before anything is written: a lock key that is not a
-- hash, or a fence counter that is not a string, raises WRONGTYPE with no
-- grant left behind (INCR, or GET, of the counter comes before the HSETs).
local n = #KEYS - 1
local fence = KEYS[#KEYS]
local free, taken, worst = false, false, 0
for i = 1, n do
  local pttl = redis.call('pttl', KEYS[i])
  if pttl == -2 then
    free = true
  elseif redis.call('hexists', KEYS[i], ARGV[1]) == 0 then
    taken = true
    if pttl < 0 or worst < 0 then
      worst = -1
    elseif pttl > worst then
      worst = pttl
    end
  end
end
if taken then
  return {0, worst}
end
local code, token = 2, 0
if free then
  code = 1
  token = redis.call('incr', fence)
else
  token = tonumber(redis.call('get', fence) or '0')
end
for i = 1, n do
  redis.call('hset', KEYS[i], ARGV[1], ARGV[3])
  redis.call('pexpire', KEYS[i], ARGV[2])
end
return {code, token}
