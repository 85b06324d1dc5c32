-- A waiter leaves the lock's queue (it gave up, was dropped, or took the
-- lock on other nodes). If it was the head and the lock is free, the next
-- waiter is told.
--
-- KEYS[1] lock hash   <prefix>{name}
-- KEYS[2] queue       <prefix>{name}:queue
-- KEYS[3] timeouts    <prefix>{name}:timeouts
-- KEYS[4] channel     <prefix>{name}:released
-- KEYS[5] (a read-write lock's writer only) the channel its waiting readers
--         listen on, <family>:writer_released: a writer that leaves the
--         waiting writers (its deadlines, KEYS[3]) publishes '0' there, so
--         the readers it held back try again at once
-- ARGV[1] waiter id
-- ARGV[2] '1' on a Redis Cluster member: messages go out with SPUBLISH
--         (sharded pub/sub, in the lock's slot), else with PUBLISH
--
-- Returns 1 if the waiter was queued, 0 if not.
local publish = ARGV[2] == '1' and 'spublish' or 'publish'
local head = redis.call('zrange', KEYS[2], 0, 0)[1]
if redis.call('zrem', KEYS[3], ARGV[1]) == 1 and KEYS[5] then
  redis.pcall(publish, KEYS[5], '0')
end
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
  return 0
end
if head == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
  local next = redis.call('zrange', KEYS[2], 0, 0)[1]
  if next then
    redis.pcall(publish, KEYS[4], next)
  end
end
return 1
