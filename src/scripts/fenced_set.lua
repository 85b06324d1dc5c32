-- A fenced write (`quorumlock::fenced::Fence::set`): SET a resource key
-- only with a fencing token at least as large as the largest token the
-- fence has seen, and record the new largest. An equal token is accepted:
-- one holder may write several times.
--
-- KEYS[1] the fence: the largest token seen, a string of decimal digits
-- KEYS[2] the resource key to write
-- ARGV[1] the writer's token: decimal digits, no sign, no leading zero
-- ARGV[2] the value
-- ARGV[3] the value's expiry in milliseconds, or '' for none
--
-- Returns {1} when written, {0, largest} when rejected (largest as a
-- string). Tokens are compared as digit strings, by length and then digit
-- by digit, so that every u64 compares exactly (a Lua number holds 53
-- bits). The fence is read and checked before anything is written: a fence
-- of another type raises WRONGTYPE, one that holds no token an error, and
-- then nothing is written.
local function is_token(s)
  return s == '0' or string.match(s, '^[1-9]%d*$') ~= nil
end

-- Whether token a is smaller than token b.
local function below(a, b)
  if #a ~= #b then
    return #a < #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return false
end

local token = ARGV[1]
if not is_token(token) then
  return redis.error_reply('ERR fencing token ' .. token .. ' is not a decimal integer')
end
local largest = redis.call('get', KEYS[1])
if largest then
  if not is_token(largest) then
    return redis.error_reply('ERR fence ' .. KEYS[1] .. ' holds no fencing token')
  end
  if below(token, largest) then
    return {0, largest}
  end
end
if ARGV[3] == '' then
  redis.call('set', KEYS[2], ARGV[2])
else
  redis.call('set', KEYS[2], ARGV[2], 'px', ARGV[3])
end
if largest ~= token then
  redis.call('set', KEYS[1], token)
end
return {1}
