-- Prelude of the renew and repair scripts a cluster member sends per shard
-- (after `#!lua flags=allow-cross-slot-keys`): one call renews locks of
-- many slots of one shard.
--
-- KEYS  one lock key of the call, only so that the cluster routes it to
--       the shard; the script does not read it from here
-- ARGV  n, then the n key names the per-slot script takes as KEYS, then
--       the arguments it takes as ARGV
--
-- The body that follows (renew.lua or repair.lua) reads its nk keys as
-- K[ko + i] and its arguments as A[ao + i]: here both are ARGV, at offsets
-- past the count and past the keys, read in place (copying them into new
-- tables cost a table store per key and argument in every call). A key
-- whose slot this node does not serve (moved, or moving and gone from
-- here: the node refuses the access with an error) answers NOT_HERE (4)
-- through hget_error: nothing was done for that lock, and the client
-- sends it again by its slot.
local nk = tonumber(ARGV[1])
local K, ko, A, ao = ARGV, 1, ARGV, 1 + nk
local function hget_error(e)
  if string.find(e.err or '', 'WRONGTYPE', 1, true) then
    return -2
  end
  return 4
end
