-- Raise fence counters to at least ARGV[1]; never lowers one.
--
-- KEYS    the fence counters <prefix>fence:{tag} to raise: one lock's (the
--         counter of its slot), or a set's (one per slot of the set)
-- ARGV[1] token
--
-- Returns the lowest counter after the call (at least the token).
-- Every counter is read before any is written: one of the wrong type
-- raises WRONGTYPE, one that is not a number an error, with nothing written.
local token = tonumber(ARGV[1])
local current = {}
for i = 1, #KEYS do
  current[i] = tonumber(redis.call('get', KEYS[i]) or '0')
  if current[i] == nil then
    return redis.error_reply('ERR fence counter ' .. KEYS[i] .. ' is not an integer')
  end
end
local lowest = nil
for i = 1, #KEYS do
  local c = current[i]
  if c < token then
    redis.call('set', KEYS[i], token)
    c = token
  end
  if lowest == nil or c < lowest then
    lowest = c
  end
end
return lowest or 0
