-- Acquire several locks at once, all or none (the multi-lock's acquire).
--
-- KEYS[1..n]   the lock hashes   <prefix>{name}, one per name of the set
-- KEYS[n+1..]  the fence counters of the set's slots <prefix>fence:{tag},
--              each once (names of one slot share a counter)
-- ARGV[1] holder id
-- ARGV[2] lease in milliseconds
-- ARGV[3] hold count the client wants this node to carry on every name
-- ARGV[4] n, the number of lock hashes
--
-- Returns {1, token}  no name was held by another holder, and at least one
--                     was free: every name is now ours with the count, and
--                     token is one above the largest of the set's counters,
--                     to which every counter of the set is now set: one
--                     token, above every earlier token of each counter;
--         {2, fence}  every name was already ours: counts set (re-entry);
--                     fence is the largest of the set's counters, to which
--                     every counter of the set is now raised;
--         {0, pttl}   another holder holds at least one name; pttl is the
--                     largest remaining time among those (-1: one of them
--                     has no TTL); nothing is written.
-- Everything is read before anything is written: a lock key that is not a
-- hash, or a fence counter that is not a string, raises WRONGTYPE with no
-- grant left behind (the counters are read before the first write).
local n = tonumber(ARGV[4])
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
local counters, top = {}, 0
for i = n + 1, #KEYS do
  counters[i] = tonumber(redis.call('get', KEYS[i]) or '0')
  if counters[i] > top then
    top = counters[i]
  end
end
local code, token = 2, top
if free then
  code, token = 1, top + 1
end
for i = n + 1, #KEYS do
  if counters[i] < token then
    redis.call('set', KEYS[i], token)
  end
end
for i = 1, n do
  redis.call('hset', KEYS[i], ARGV[1], ARGV[3])
  redis.call('pexpire', KEYS[i], ARGV[2])
end
return {code, token}
