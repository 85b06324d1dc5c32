-- A read-write lock's writer: granted where no reader or writer holds it.
--
-- KEYS[1] writer             <family>:writer, the writer's lock hash
-- KEYS[2] fence              the fence counter of the lock's slot
-- KEYS[3] readers            <family>:readers, the set of reader keys
-- KEYS[4] waiting writers    <family>:timeouts, writer id -> node time (ms)
--                            until which it holds new readers back
-- ARGV[1] holder id
-- ARGV[2] lease in milliseconds
-- ARGV[3] hold count the client wants this node to carry
-- ARGV[4] '1' for a re-entry: a missing key is reported, never created
-- ARGV[5] the writer's waiter id (one per acquisition, across its attempts)
-- ARGV[6] how long a refused writer holds new readers back, in ms
--
-- Returns {1, token}  granted: the fence counter was INCRed, and the writer
--                     leaves the waiting writers;
--         {2, fence}  our holder already holds it (re-entry);
--         {0, pttl}   another writer holds it (its PTTL), or live readers
--                     do (the longest PTTL among them): the writer is
--                     (again) among the waiting writers until ARGV[6] ms
--                     from now, and new readers are refused meanwhile;
--         {3, 0}      re-entry only: the key is missing.
-- Reader keys that expired are dropped from the readers set on the way.
local function wait_here()
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local hold_back = tonumber(ARGV[6])
  redis.call('zadd', KEYS[4], now + hold_back, ARGV[5])
  redis.call('pexpire', KEYS[4], math.max(hold_back, redis.call('pttl', KEYS[4])))
end
local pttl = redis.call('pttl', KEYS[1])
if pttl ~= -2 then
  if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    local fence = tonumber(redis.call('get', KEYS[2]) or '0')
    redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
    redis.call('pexpire', KEYS[1], ARGV[2])
    return {2, fence}
  end
  if ARGV[4] ~= '1' then
    wait_here()
  end
  return {0, pttl}
end
if ARGV[4] == '1' then
  return {3, 0}
end
local longest = -2
for _, key in ipairs(redis.call('smembers', KEYS[3])) do
  local left = redis.call('pttl', key)
  if left == -2 then
    redis.call('srem', KEYS[3], key)
  elseif left > longest or left == -1 then
    longest = left
  end
end
if longest ~= -2 then
  wait_here()
  return {0, longest}
end
local token = redis.call('incr', KEYS[2])
redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
redis.call('pexpire', KEYS[1], ARGV[2])
redis.call('zrem', KEYS[4], ARGV[5])
return {1, token}
