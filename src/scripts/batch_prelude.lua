-- Prelude of the renew and repair scripts as a standalone master, or one
-- slot of a cluster, takes them: every key is declared, so the only error
-- HGET can meet is a key of the wrong type. The body reads its nk keys as
-- K[ko + i] and its arguments as A[ao + i] (see shard_prelude.lua).
local K, ko, A, ao, nk = KEYS, 0, ARGV, 0, #KEYS
local function hget_error(e)
  return -2
end
