-- Prelude of the renew and repair scripts a cluster member sends per shard
-- (after `#!lua flags=allow-cross-slot-keys`): one call renews locks of
-- many slots of one shard.
--
-- KEYS  one lock key of the call, only so that the cluster routes it to
--       the shard; the script does not read it from here
-- ARGV  n, then the n key names the per-slot script takes as KEYS, then
--       the arguments it takes as ARGV
--
-- The body that follows (renew.lua or repair.lua) reads KEYS and ARGV as
-- rebound here. A key whose slot this node does not serve (moved, or
-- moving and gone from here: the node refuses the access with an error)
-- answers NOT_HERE (4) through hget_error: nothing was done for that lock,
-- and the client sends it again by its slot.
local n = tonumber(ARGV[1])
local keys, args = {}, {}
for i = 1, n do
  keys[i] = ARGV[1 + i]
end
for i = n + 2, #ARGV do
  args[#args + 1] = ARGV[i]
end
local KEYS, ARGV = keys, args
local function hget_error(e)
  if string.find(e.err or '', 'WRONGTYPE', 1, true) then
    return -2
  end
  return 4
end
