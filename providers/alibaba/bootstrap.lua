-- What an ECS instance runs first: the user data of a launch. For now the ECSNodeClass's
-- spec.userData unchanged; the ACK attach script (cluster type ACKManaged) is added here.
--   user_data(ctx, nodeclaim, nodeclass, capacity_type) -> text | nil, err
local M = {}

function M.user_data(_ctx, _nodeclaim, nodeclass, _capacity_type)
  local spec = type(nodeclass) == "table" and nodeclass.spec or nil
  local text = type(spec) == "table" and spec.userData or nil
  return type(text) == "string" and text or ""
end

return M
