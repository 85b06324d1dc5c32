-- Reads an election's leader as this node sees it (see src/election/).
--
-- KEYS[1] lock hash   <prefix>{name}, the election's lock
-- KEYS[2] record      <prefix>{name}:leader (see proclaim.lua)
--
-- Returns {0}        no lock: nobody leads here (resigned, expired, never);
--         {1, pttl}  the lock is held, but not by the record's holder (a
--                    candidate that won and has not proclaimed yet here);
--         {2, pttl, holder, term, rev, value}
--                    the record's holder holds the lock: it leads here.
local pttl = redis.call('pttl', KEYS[1])
if pttl == -2 then
  return {0}
end
local r = redis.call('hmget', KEYS[2], 'holder', 'term', 'rev', 'value')
if not r[1] or redis.call('hexists', KEYS[1], r[1]) == 0 then
  return {1, pttl}
end
return {2, pttl, r[1], r[2], r[3], r[4]}
