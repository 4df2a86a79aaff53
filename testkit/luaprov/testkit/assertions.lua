-- luassert extensions for the policy contracts (docs/lua-api.md "Contracts"), registered when the
-- kit is required and luassert is available (always under busted):
--   assert.drifted([reason,] policy, nodeclaim, nodeclass, instance [, ctx])
--   assert.not_drifted(policy, nodeclaim, nodeclass, instance [, ctx])
--   assert.drift_unknown(policy, nodeclaim, nodeclass, instance [, ctx [, err_pattern]])
--   assert.repair_policy({condition_type=, condition_status=[, toleration_seconds=]}, list)
--   assert.valid_repair_policies(list)
-- The drift ones call the policy as the engine does: static_drift(nodeclaim, nodeclass) first when
-- the policy exports it, then is_drifted(nodeclaim, nodeclass, instance, ctx) (ctx defaults to {}).
local M = {}

local STATUSES = { True = true, False = true, Unknown = true }

--- evaluate(policy, nodeclaim, nodeclass, instance, ctx) -> reason ("" when not drifted) | nil, err
function M.evaluate(policy, nodeclaim, nodeclass, instance, ctx)
  assert(type(policy) == "table" and type(policy.is_drifted) == "function",
    "expected a drift policy (a table with is_drifted) as the policy argument")
  if type(policy.static_drift) == "function" then
    local reason = policy.static_drift(nodeclaim, nodeclass)
    if reason ~= nil and reason ~= "" then return reason end
  end
  local reason, err = policy.is_drifted(nodeclaim, nodeclass, instance, ctx or {})
  if reason == nil and err ~= nil then return nil, err end
  return reason or ""
end

local function show(reason, err)
  if reason == nil then return ("not known yet (nil, %q)"):format(tostring(err)) end
  if reason == "" then return 'not drifted ("")' end
  return ("drifted: %q"):format(reason)
end

local FIELDS = { condition_type = true, condition_status = true, toleration_seconds = true }

-- The value as the engine's messages show it: "missing", a quoted string, or tostring.
local function shown(v)
  if v == nil then return "missing" end
  if type(v) == "string" then return ("%q"):format(v) end
  return tostring(v)
end

--- check_repair_policies(list) -> true | false, message: the engine's load-time check of a repair
-- policy list, with the texts `luaprov check` prints after "file:line: " (engine/contract/contracts.c).
function M.check_repair_policies(list)
  if type(list) ~= "table" then
    return false, "policies(ctx) must return a list of {condition_type, condition_status, toleration_seconds}, not a "
      .. type(list)
  end
  for i, p in ipairs(list) do
    if type(p) ~= "table" then return false, ("policies(ctx)[%d] must be a table, not a %s"):format(i, type(p)) end
    for k in pairs(p) do
      if not FIELDS[k] then
        return false, ("policies(ctx)[%d] has unknown field '%s'; an entry holds only condition_type, "
          .. "condition_status and toleration_seconds"):format(i, tostring(k))
      end
    end
    if type(p.condition_type) ~= "string" or p.condition_type == "" then
      return false, ('policies(ctx)[%d].condition_type must be a non-empty string, not %s; name a Node '
        .. 'condition such as "Ready"'):format(i, p.condition_type == nil and "missing" or tostring(p.condition_type))
    end
    if not STATUSES[p.condition_status] then
      local near = ""
      for status in pairs(STATUSES) do
        if type(p.condition_status) == "string" and status:lower() == p.condition_status:lower() then
          near = (' (did you mean "%s"?)'):format(status)
        end
      end
      return false, ('policies(ctx)[%d].condition_status is %s; it must be "True", "False" or "Unknown"%s')
        :format(i, shown(p.condition_status), near)
    end
    if type(p.toleration_seconds) ~= "number" or p.toleration_seconds < 0 then
      return false, ("policies(ctx)[%d].toleration_seconds is %s; it must be a number of seconds >= 0 (how long "
        .. "the condition may last before the node is repaired)"):format(i, shown(p.toleration_seconds))
    end
  end
  return true
end

local function describe_list(list)
  local lines = {}
  for i, p in ipairs(type(list) == "table" and list or {}) do
    lines[i] = ("  %s=%s for %ss"):format(tostring(p.condition_type), tostring(p.condition_status),
      tostring(p.toleration_seconds))
  end
  return #lines > 0 and table.concat(lines, "\n") or "  (empty)"
end

function M.register(assert, say)
  -- Each assertion sets its own message text in args[1] (nofmt: printed as is).
  local function message(args, text)
    args[1], args.n, args.nofmt = text, 1, { true }
  end
  for _, name in ipairs({ "drifted", "not_drifted", "drift_unknown", "repair_policy", "valid_repair_policies" }) do
    say:set("assertion." .. name .. ".positive", "%s")
    say:set("assertion." .. name .. ".negative", "%s")
  end

  assert:register("assertion", "drifted", function(_state, args)
    local want = type(args[1]) == "string" and args[1] or nil
    local first = want and 2 or 1
    local got, err = M.evaluate(args[first], args[first + 1], args[first + 2], args[first + 3], args[first + 4])
    local ok = got ~= nil and got ~= "" and (want == nil or got == want)
    message(args, ("Expected the drift policy to report %s, it answered %s"):format(
      want and ("%q"):format(want) or "a drift reason", show(got, err)))
    return ok
  end, "assertion.drifted.positive", "assertion.drifted.negative")

  assert:register("assertion", "not_drifted", function(_state, args)
    local got, err = M.evaluate(args[1], args[2], args[3], args[4], args[5])
    message(args, ("Expected the drift policy to report no drift, it answered %s"):format(show(got, err)))
    return got == ""
  end, "assertion.not_drifted.positive", "assertion.not_drifted.negative")

  assert:register("assertion", "drift_unknown", function(_state, args)
    local got, err = M.evaluate(args[1], args[2], args[3], args[4], args[5])
    local pattern = args[6]
    local ok = got == nil and (pattern == nil or tostring(err):find(pattern) ~= nil)
    message(args, ("Expected the drift policy to answer nil, err%s, it answered %s"):format(
      pattern and (" (err matching %q)"):format(pattern) or "", show(got, err)))
    return ok
  end, "assertion.drift_unknown.positive", "assertion.drift_unknown.negative")

  assert:register("assertion", "repair_policy", function(_state, args)
    local want, list = args[1], args[2]
    local ok = false
    for _, p in ipairs(type(list) == "table" and list or {}) do
      if p.condition_type == want.condition_type and p.condition_status == want.condition_status
        and (want.toleration_seconds == nil or p.toleration_seconds == want.toleration_seconds) then
        ok = true
      end
    end
    message(args, ("Expected a repair policy %s=%s%s in:\n%s"):format(tostring(want.condition_type),
      tostring(want.condition_status), want.toleration_seconds and (" for %ss"):format(want.toleration_seconds) or "",
      describe_list(list)))
    return ok
  end, "assertion.repair_policy.positive", "assertion.repair_policy.negative")

  assert:register("assertion", "valid_repair_policies", function(_state, args)
    local ok, err = M.check_repair_policies(args[1])
    message(args, ok and "Expected the repair policies to break the contract" or ("Invalid repair policies: " .. err))
    return ok
  end, "assertion.valid_repair_policies.positive", "assertion.valid_repair_policies.negative")
end

return M
