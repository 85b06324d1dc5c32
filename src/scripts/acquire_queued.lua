-- Acquire for a waiter with a place in the lock's queue: the fair lock, and
-- the retries of a plain waiter, whose place decides whom a release wakes.
--
-- KEYS[1] lock hash   <prefix>{name}
-- KEYS[2] fence       <prefix>fence:{tag}, the fence counter of the lock's slot
-- KEYS[3] queue       <prefix>{name}:queue, a sorted set: waiter id -> ticket
-- KEYS[4] timeouts    <prefix>{name}:timeouts, a sorted set: waiter id ->
--                     the node time (ms) after which the waiter counts as gone
-- KEYS[5] channel     <prefix>{name}:released
-- ARGV[1] holder id
-- ARGV[2] lease in milliseconds
-- ARGV[3] hold count the client wants this node to carry
-- ARGV[4] waiter id (the same for every attempt of one acquisition)
-- ARGV[5] ticket: 0 asks for the next one (or keeps the waiter's own);
--         another value is the ticket every node is to order the waiter by
-- ARGV[6] queue timeout in milliseconds: a waiter that makes no call for
--         this long is skipped
-- ARGV[7] 1 for a fair request (granted only as the head of the queue),
--         0 for a plain one (granted whenever the lock is free)
-- ARGV[8] '1' on a Redis Cluster member: messages go out with SPUBLISH
--         (sharded pub/sub, in the lock's slot), else with PUBLISH
--
-- Order is by ticket, then by waiter id. Tickets are the queue's tail
-- ticket plus one, so nodes whose queues agree hand out the same ticket;
-- where they disagree the client settles on the largest and sends it.
--
-- Returns {1, token}        granted (the waiter leaves the queue);
--         {2, fence}        our holder already holds it (re-entry);
--         {0, wait, ticket} not granted: queued or refreshed with `ticket`;
--                           wait is the holder's PTTL, or, when the lock is
--                           free but another waiter's turn, how long that
--                           waiter has left to claim it (-1: unknown).
local publish = ARGV[8] == '1' and 'spublish' or 'publish'
local now = now_ms()
-- The keys are read for their type before anything is written (a script
-- stopped by an error keeps the writes it made, and an error reply must
-- mean nothing changed): a lock key that is not a hash raises WRONGTYPE in
-- HEXISTS, a fence counter that is not a string in GET when it would be
-- used (the lock free, or ours), and a queue key of another type in the
-- first read of `drop_gone`.
local pttl = redis.call('pttl', KEYS[1])
local ours = pttl ~= -2 and redis.call('hexists', KEYS[1], ARGV[1]) == 1
if pttl == -2 or ours then
  redis.call('get', KEYS[2])
end
-- Waiters that stopped calling are dropped from the head of the queue; the
-- next one is told if the lock is free.
local head, dropped = drop_gone(KEYS[3], KEYS[4], now)
local wait = pttl
if pttl == -2 then
  if ARGV[7] == '0' or not head or head == ARGV[4] then
    local token = redis.call('incr', KEYS[2])
    redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('zrem', KEYS[3], ARGV[4])
    redis.call('zrem', KEYS[4], ARGV[4])
    return {1, token}
  end
  if dropped then
    redis.pcall(publish, KEYS[5], head)
  end
  wait = tonumber(redis.call('zscore', KEYS[4], head)) - now
elseif ours then
  local fence = tonumber(redis.call('get', KEYS[2]) or '0')
  redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {2, fence}
end
local ticket = tonumber(ARGV[5])
if ticket == 0 then
  ticket = tonumber(redis.call('zscore', KEYS[3], ARGV[4]) or '0')
  if ticket == 0 then
    local tail = redis.call('zrange', KEYS[3], -1, -1, 'WITHSCORES')
    ticket = tonumber(tail[2] or '0') + 1
  end
end
local timeout = tonumber(ARGV[6])
redis.call('zadd', KEYS[3], ticket, ARGV[4])
redis.call('zadd', KEYS[4], now + timeout, ARGV[4])
-- The queue's keys live until the latest deadline among its waiters, so
-- they go away with the last live waiter. That is not always now + timeout:
-- waiters may send different timeouts, and a shorter one must not cut the
-- place of a waiter with a longer one.
local last = tonumber(redis.call('zrange', KEYS[4], -1, -1, 'WITHSCORES')[2])
redis.call('pexpire', KEYS[3], last - now)
redis.call('pexpire', KEYS[4], last - now)
return {0, wait, ticket}
