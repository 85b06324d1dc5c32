-- Administrative break: delete the lock whoever holds it, and wake waiters.
--
-- KEYS[1] lock hash   <prefix>{name}
-- KEYS[2] channel     <prefix>{name}:released
-- KEYS[3] optional: another client's release channel (Redisson's), where
--         `0` is published too, after the message on KEYS[2]
-- ARGV[1] '1' on a Redis Cluster member: messages go out with SPUBLISH
--         (sharded pub/sub, in the lock's slot), else with PUBLISH
--
-- Returns 1 if a lock was deleted, 0 if there was none.
local publish = ARGV[1] == '1' and 'spublish' or 'publish'
if redis.call('del', KEYS[1]) == 1 then
  -- pcall: without rights on the channel (ACL), waiters poll instead.
  redis.pcall(publish, KEYS[2], '')
  if KEYS[3] then
    redis.pcall(publish, KEYS[3], '0')
  end
  return 1
end
return 0
