-- Adopt the fence counter of the layout before per-slot counters: raise
-- every per-slot counter to at least the old one, then delete it, so that
-- no name's token goes back after an upgrade. Only what that counter can
-- have been is taken: a string integer as INCR writes it (decimal digits,
-- no sign, no leading zero); any other value or type there is someone
-- else's key, left as it is.
--
-- KEYS[1]     the old counter <prefix>fence (one per node, for every lock)
-- KEYS[2..]   the per-slot counters <prefix>fence:{tag}, all 16384
--
-- Returns the old counter's value (0 when there was none: nothing done),
-- or -1 when the key holds something else (nothing done).
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'string' then
  return -1
end
local old = redis.call('get', KEYS[1])
if old ~= '0' and not string.match(old, '^[1-9]%d*$') then
  return -1
end
local value = tonumber(old)
for i = 2, #KEYS do
  local c = tonumber(redis.call('get', KEYS[i]) or '0') or 0
  if c < value then
    redis.call('set', KEYS[i], old)
  end
end
redis.call('del', KEYS[1])
return value
