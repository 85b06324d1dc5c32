-- Adopt the fence counter of the layout before per-slot counters: raise
-- every per-slot counter to at least the old one, then delete it, so that
-- no name's token goes back after an upgrade.
--
-- KEYS[1]     the old counter <prefix>fence (one per node, for every lock)
-- KEYS[2..]   the per-slot counters <prefix>fence:{tag}, all 16384
--
-- Returns the old counter's value (0 when there was none: nothing done).
local old = redis.call('get', KEYS[1])
if not old then
  return 0
end
local value = tonumber(old)
if value == nil then
  return redis.error_reply('ERR fence counter ' .. KEYS[1] .. ' is not an integer')
end
for i = 2, #KEYS do
  local c = tonumber(redis.call('get', KEYS[i]) or '0') or 0
  if c < value then
    redis.call('set', KEYS[i], value)
  end
end
redis.call('del', KEYS[1])
return value
