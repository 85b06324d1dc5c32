-- Prelude of the renew and repair scripts as a standalone master, or one
-- slot of a cluster, takes them: every key is declared, so the only error
-- HGET can meet is a key of the wrong type.
local function hget_error(e)
  return -2
end
