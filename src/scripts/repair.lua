-- Re-create locks that a node lost, for holds that a quorum of other nodes
-- confirmed in the same watchdog tick (the watchdog's repair batch).
--
-- KEYS  the lock hashes, one per lock; then the node's fence counter last
-- ARGV  quadruples, one per lock: holder id, authoritative hold count,
--       fencing token, lease in milliseconds
--
-- Returns one code per lock:
--   2 repaired: the key was missing and is re-created for our holder; the
--     fence counter is raised to the token (the node may have lost it too);
--   1 extended: our holder already held it again;
--   0 conflict: another holder took it meanwhile; nothing is changed;
--  -2 error: the key or the counter holds a value of the wrong type.
-- The counter is read once, before anything is written: a counter of the
-- wrong type (or not a number) fails every lock that would need it, and
-- nothing is created, rather than an error after some keys were.
local out = {}
local fence = KEYS[#KEYS]
local f = redis.pcall('get', fence)
local counter = nil
if type(f) ~= 'table' then
  counter = tonumber(f or '0')
end
local raise = 0
for i = 1, #KEYS - 1 do
  local lock = KEYS[i]
  local holder, count = ARGV[4 * i - 3], ARGV[4 * i - 2]
  local token, lease = tonumber(ARGV[4 * i - 1]), ARGV[4 * i]
  local held = redis.pcall('hget', lock, holder)
  if type(held) == 'table' then
    out[i] = -2
  elseif held then
    redis.call('hset', lock, holder, count)
    redis.call('pexpire', lock, lease)
    out[i] = 1
  elseif redis.call('exists', lock) == 1 then
    out[i] = 0
  elseif counter == nil then
    out[i] = -2
  else
    redis.call('hset', lock, holder, count)
    redis.call('pexpire', lock, lease)
    if token > raise then
      raise = token
    end
    out[i] = 2
  end
end
if counter ~= nil and raise > counter then
  redis.call('set', fence, raise)
end
return out
