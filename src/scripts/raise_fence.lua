-- Raise the fence counter to at least ARGV[1]; never lowers it.
--
-- KEYS[1] fence       <prefix>fence, the node's one fence counter
-- ARGV[1] token
--
-- Returns the counter after the call.
local current = tonumber(redis.call('get', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if current < token then
  redis.call('set', KEYS[1], token)
  return token
end
return current
