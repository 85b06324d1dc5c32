-- A read-write lock's reader: granted where no writer holds or waits.
--
-- KEYS[1] this reader's key  <family>:reader:<id>, a hash like a lock's
-- KEYS[2] fence              the fence counter of the lock's slot (read only)
-- KEYS[3] writer             <family>:writer, the writer's lock hash
-- KEYS[4] readers            <family>:readers, the set of reader keys
-- KEYS[5] waiting writers    <family>:timeouts, writer id -> node time (ms)
--                            until which it holds new readers back
-- ARGV[1] holder id
-- ARGV[2] lease in milliseconds
-- ARGV[3] hold count the client wants this node to carry
-- ARGV[4] '1' for a re-entry: a missing key is reported, never created
--
-- Returns {1, fence}  granted (the fence counter, at least 1, is not raised:
--                     a reader's token orders nothing);
--         {2, fence}  our holder already holds this key: count and lease set;
--         {0, pttl}   a writer holds the lock (its PTTL) or waits for it (the
--                     time it holds readers back), or this reader key is
--                     still held by an earlier attempt of the same reader;
--         {3, 0}      re-entry only: the key is missing.
-- The check and the grant are one script: no writer can come in between.
-- Every reader key is kept in the readers set, so that a writer finds it;
-- each grant drops up to two keys of the set that have expired.
local pttl = redis.call('pttl', KEYS[1])
if pttl ~= -2 then
  if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
    redis.call('pexpire', KEYS[1], ARGV[2])
    return {2, math.max(1, tonumber(redis.call('get', KEYS[2]) or '0'))}
  end
  return {0, pttl}
end
if ARGV[4] == '1' then
  return {3, 0}
end
local writer = redis.call('pttl', KEYS[3])
if writer ~= -2 then
  return {0, writer}
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', KEYS[5], '-inf', now)
local waiting = redis.call('zrange', KEYS[5], 0, 0, 'WITHSCORES')
if waiting[2] then
  return {0, math.max(1, tonumber(waiting[2]) - now)}
end
local fence = math.max(1, tonumber(redis.call('get', KEYS[2]) or '0'))
redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
redis.call('pexpire', KEYS[1], ARGV[2])
for _, key in ipairs(redis.call('srandmember', KEYS[4], 2)) do
  if redis.call('exists', key) == 0 then
    redis.call('srem', KEYS[4], key)
  end
end
redis.call('sadd', KEYS[4], KEYS[1])
return {1, fence}
