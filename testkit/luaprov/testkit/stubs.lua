-- Stubs the kit installs (kit.stub, kit.http, kit.clock) and how to take them back. Every stub is
-- reverted by reset(), newest first, so a field stubbed twice ends with its original value.
local M = {}

local undo = {}
local on_reset = {}

--- stub(tbl, key, value): tbl[key] = value until the next reset().
function M.stub(tbl, key, value)
  assert(type(tbl) == "table", "kit.stub: expected a table as argument 1")
  local old = rawget(tbl, key)
  undo[#undo + 1] = function() tbl[key] = old end
  tbl[key] = value
end

--- on_reset(fn): fn() runs at every reset() (the kit's own modules clear their state this way).
function M.on_reset(fn)
  on_reset[#on_reset + 1] = fn
end

function M.reset()
  for i = #undo, 1, -1 do undo[i]() end
  undo = {}
  for _, fn in ipairs(on_reset) do fn() end
end

--- active() -> number of stubs in place (for the kit's own specs).
function M.active()
  return #undo
end

return M
