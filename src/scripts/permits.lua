-- A semaphore's permit slots as one node sees them, and its permit count.
--
-- KEYS[1]     the permit count   <family>:permits (a string, no expiry)
-- KEYS[2..]   the permit slots    <family>:permit:<i>, i = 0..#KEYS-2
-- ARGV[1]     the count this client was given
--
-- Returns {count, pttl_0, pttl_1, ...}: the count recorded (this client's,
-- written now if none was), and per slot its PTTL in ms (-2 free, -1 held
-- without expiry). A count key of another type raises WRONGTYPE.
local count = redis.call('get', KEYS[1])
if not count then
  redis.call('set', KEYS[1], ARGV[1])
  count = ARGV[1]
end
local out = {tonumber(count) or -1}
for i = 2, #KEYS do
  out[i] = redis.call('pttl', KEYS[i])
end
return out
