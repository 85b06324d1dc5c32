-- An election's leader proclaims its value (see src/election/): the
-- record is written only where the leader's hold is alive, and never over
-- a record of a later term or revision.
--
-- KEYS[1] lock hash   <prefix>{name}, the election's lock
-- KEYS[2] record      <prefix>{name}:leader, a hash: holder, term, rev, value
-- KEYS[3] channel     <prefix>{name}:elected, where observers listen
-- ARGV[1] holder id of the leader's hold
-- ARGV[2] term: the hold's fencing token
-- ARGV[3] revision of the value within the term (1 for the campaign's)
-- ARGV[4] value
-- ARGV[5] '1' on a Redis Cluster member: the message goes out with
--         SPUBLISH (sharded pub/sub, in the lock's slot), else with PUBLISH
--
-- Returns  1 written (or already there): the record is this leader's
--            (term, revision, value); a change publishes `<term> <rev>`;
--          0 the hold is not alive on this node (nothing written);
--         -1 the record is of a later term, or a later revision of this
--            term (nothing written).
-- Every key is read before anything is written: a WRONGTYPE error leaves
-- nothing behind.
local publish = ARGV[5] == '1' and 'spublish' or 'publish'
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local cur = redis.call('hmget', KEYS[2], 'holder', 'term', 'rev', 'value')
local term = tonumber(ARGV[2])
local rev = tonumber(ARGV[3])
local t = tonumber(cur[2] or '0')
local r = tonumber(cur[3] or '0')
if t > term or (t == term and r > rev) then
  return -1
end
if cur[1] == ARGV[1] and t == term and r == rev and cur[4] == ARGV[4] then
  return 1
end
redis.call('hset', KEYS[2], 'holder', ARGV[1], 'term', ARGV[2], 'rev', ARGV[3], 'value', ARGV[4])
-- pcall: without rights on the channel (ACL), observers poll instead.
redis.pcall(publish, KEYS[3], ARGV[2] .. ' ' .. ARGV[3])
return 1
