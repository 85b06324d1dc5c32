-- Release one level, or all of them, for the holding owner only.
--
-- KEYS[1] lock hash   <prefix>{name}
-- KEYS[2] channel     <prefix>{name}:released
-- KEYS[3] fence       <prefix>fence:{tag}, the fence counter of the lock's slot
-- KEYS[4] queue       <prefix>{name}:queue (see acquire_queued.lua)
-- KEYS[5] timeouts    <prefix>{name}:timeouts
-- KEYS[6] optional: another client's release channel (Redisson's
--         redisson_lock__channel:{name}), where a full release also
--         publishes `0`, after its own message
-- ARGV[1] owner id
-- ARGV[2] hold count left after this release (0 releases the lock)
-- ARGV[3] lease in milliseconds (used when the count stays above 0)
-- ARGV[4] fencing token of the hold (0 for a rollback): the fence counter is
--         raised to it, so a later holder always gets a larger token here.
-- ARGV[5] '1' on a Redis Cluster member: messages go out with SPUBLISH
--         (sharded pub/sub, in the lock's slot), else with PUBLISH
-- ARGV[1] is the holder id: the owner's id plus a suffix unique to the hold.
--
-- Returns  2 released fully: the hash is deleted and a message published
--            (when the user may publish on the channel): `<waiter>
--            <holder id>`, the waiter whose turn it is (the head of the
--            queue once waiters that stopped calling are dropped, or ''
--            when none is queued) and who released, followed by
--            ` rollback` for a rollback (token 0: a failed attempt undoing
--            its grants, which frees a minority at most);
--          1 count lowered and lease refreshed;
--          0 the key is missing (expired, or the node lost it);
--         -1 another owner holds the lock.
local publish = ARGV[5] == '1' and 'spublish' or 'publish'
if not redis.call('hget', KEYS[1], ARGV[1]) then
  if redis.call('exists', KEYS[1]) == 0 then
    return 0
  end
  return -1
end
-- Every key is read before anything is written (a script stopped by an
-- error keeps the writes it made, and an error reply must mean nothing
-- changed): the fence counter, then, for a full release, the queue, whose
-- gone waiters are dropped (a queue or timeouts key of another type raises
-- WRONGTYPE in `drop_gone` before its first write).
local token = tonumber(ARGV[4])
local raise = false
if token > 0 then
  raise = tonumber(redis.call('get', KEYS[3]) or '0') < token
end
if tonumber(ARGV[2]) > 0 then
  if raise then
    redis.call('set', KEYS[3], token)
  end
  redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 1
end
local head = nil
if redis.call('exists', KEYS[4]) == 1 then
  head = drop_gone(KEYS[4], KEYS[5], now_ms())
end
if raise then
  redis.call('set', KEYS[3], token)
end
redis.call('del', KEYS[1])
-- pcall: a user without rights on the channel (ACL) still releases; its
-- waiters poll instead of being woken.
local message = (head or '') .. ' ' .. ARGV[1]
if token == 0 then
  message = message .. ' rollback'
end
redis.pcall(publish, KEYS[2], message)
if KEYS[6] then
  redis.pcall(publish, KEYS[6], '0')
end
return 2
