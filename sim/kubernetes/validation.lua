-- What a write request may say besides its body (dryRun, fieldValidation, fieldManager) and what the
-- simulator checks of a body before storing it: fields its kind does not declare (reported as the
-- apiserver does for fieldValidation Strict or Warn) and the rules of the kinds it models
-- (a PodDisruptionBudget sets minAvailable or maxUnavailable, not both).
local schemas = require "sim.kubernetes.schemas"
local wire = require "sim.kubernetes.wire"

local present = wire.present

local M = {}

local DIRECTIVES = { Ignore = true, Warn = true, Strict = true }

--- options(params[, delete_options]) -> {dry_run, validation, warnings}: the write options of a
-- request. dryRun=All (query or DeleteOptions) answers as if done and stores nothing. The apiserver's
-- default directive is Warn: unknown fields are dropped and named in a Warning header.
function M.options(params, delete_options)
  local dry = params.dryRun
  if type(delete_options) == "table" and wire.is_array(delete_options.dryRun) then
    dry = delete_options.dryRun[1] or dry
  end
  if dry ~= nil and dry ~= "" and dry ~= "All" then
    wire.bad_request('Invalid dry run value "' .. dry .. '": the only supported value is "All"')
  end
  local directive = params.fieldValidation
  if directive == nil or directive == "" then directive = "Warn" end
  if not DIRECTIVES[directive] then
    wire.bad_request('fieldValidation: Unsupported value: "' .. directive
      .. '": supported values: "Ignore", "Strict", "Warn"')
  end
  local manager = params.fieldManager
  if manager and (#manager > 128 or manager:find("[%c]")) then
    wire.bad_request("fieldManager: Invalid value: the field manager must be at most 128 printable characters")
  end
  return { dry_run = dry == "All", validation = directive, warnings = {} }
end

--- warning_headers(opts) -> the Warning header of the response (RFC 7234 code 299), or nil.
function M.warning_headers(opts)
  if #opts.warnings == 0 then return nil end
  local parts = {}
  for i, w in ipairs(opts.warnings) do parts[i] = '299 - "' .. w:gsub('["\\]', "\\%0") .. '"' end
  return { warning = table.concat(parts, ", ") }
end

local function check_fields(res, obj, opts)
  if opts.validation == "Ignore" then return end
  local unknown = schemas.unknown_fields(res.group, res.kind, obj)
  if #unknown == 0 then return end
  local said = {}
  for i, field in ipairs(unknown) do said[i] = 'unknown field "' .. field .. '"' end
  if opts.validation == "Strict" then
    wire.bad_request(string.format('%s in version "%s" cannot be handled as a %s: strict decoding error: %s',
      res.kind, res.version, res.kind, table.concat(said, ", ")))
  end
  for _, w in ipairs(said) do opts.warnings[#opts.warnings + 1] = w end
end

-- "50%" or a non-negative integer, as an IntOrString of a PodDisruptionBudget.
local function int_or_percent(v)
  if math.type(v) == "integer" then return v >= 0 end
  if type(v) ~= "string" then return false end
  local pct = tonumber(v:match("^(%d+)%%$"))
  return pct ~= nil and pct <= 100
end

local function check_pdb(res, obj)
  local spec = type(obj.spec) == "table" and obj.spec or {}
  local name = obj.metadata.name
  if present(spec.minAvailable) and present(spec.maxUnavailable) then
    wire.invalid(res, name, "spec", "Invalid value: minAvailable and maxUnavailable cannot be both set")
  end
  for _, field in ipairs { "minAvailable", "maxUnavailable" } do
    if present(spec[field]) and not int_or_percent(spec[field]) then
      wire.invalid(res, name, "spec." .. field, "Invalid value: " .. tostring(spec[field])
        .. ": must be a non-negative integer or a percentage between 0% and 100%")
    end
  end
end

local KIND_RULES = { PodDisruptionBudget = check_pdb }

--- check(res, obj, opts): raises a 400 or 422 Status when obj may not be stored as res; adds the
-- warnings of fieldValidation Warn to opts.
function M.check(res, obj, opts)
  check_fields(res, obj, opts)
  local rule = KIND_RULES[res.kind]
  if rule then rule(res, obj) end
end

return M
