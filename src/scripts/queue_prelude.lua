-- Shared by the scripts that read a lock's queue (prepended to them).
--
-- now_ms(): the node's clock in milliseconds. Queue deadlines are the
-- node's own times, so clients' clocks never need to agree.
-- drop_gone(queue, timeouts, now): drops, from the head of the queue, the
-- waiters whose deadline has passed (they stopped calling), and returns the
-- head left, if any, and whether any was dropped.
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function drop_gone(queue, timeouts, now)
  local dropped = false
  local head = redis.call('zrange', queue, 0, 0)[1]
  while head and tonumber(redis.call('zscore', timeouts, head) or '0') <= now do
    redis.call('zrem', queue, head)
    redis.call('zrem', timeouts, head)
    dropped = true
    head = redis.call('zrange', queue, 0, 0)[1]
  end
  return head, dropped
end
