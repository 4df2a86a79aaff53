-- What the simulated account has done: its instances, the client tokens it has seen, and how many
-- calls each action received (tests assert "a retried create launched one instance", "List made N
-- calls" from /_sim/state).
--
-- An instance's status is computed from simulated time rather than stored, so advancing the clock
-- moves every instance at once: Pending, Starting after 5 s, Running after 15 s. An explicit status
-- set through the admin path (Stopping, Stopped) overrides the lifecycle.
local luaprov = require "luaprov"
local catalogue = require "sim.alibaba.catalogue"
local clock = require "sim.clock"

local crypto = luaprov.crypto

local M = {}

M.STARTING_AFTER = 5
M.RUNNING_AFTER = 15

local instances, order, tokens, calls, errors, created_count

--- reset(): no instances, no tokens, no counts.
function M.reset()
  instances, order, tokens, calls, errors, created_count = {}, {}, {}, {}, {}, 0
end

--- count(action, failed): one more call of `action` (and one more failure when `failed`).
function M.count(action, failed)
  action = action or "(none)"
  calls[action] = (calls[action] or 0) + 1
  if failed then errors[action] = (errors[action] or 0) + 1 end
end

--- new_id(prefix) -> an ID shaped like Alibaba's for cn-hangzhou ("i-bp1" + 17 characters), unique in
-- this run and deterministic in creation order.
function M.new_id(prefix)
  created_count = created_count + 1
  return prefix .. crypto.sha256_hex("luaprov-sim:" .. prefix .. created_count):sub(1, 17)
end

--- status(instance[, now]) -> Pending | Starting | Running | Stopping | Stopped.
function M.status(inst, now)
  if inst.status then return inst.status end
  local age = (now or clock.now()) - inst.created
  if age < M.STARTING_AFTER then return "Pending" end
  if age < M.RUNNING_AFTER then return "Starting" end
  return "Running"
end

--- add(instance): stores a new instance (instance.id set by the caller).
function M.add(inst)
  instances[inst.id] = inst
  order[#order + 1] = inst.id
end

function M.get(id) return instances[id] end

--- remove(id) -> the removed instance or nil. Released instances disappear from every listing, as on
-- the real API (there is no "Deleted" status).
function M.remove(id)
  local inst = instances[id]
  if not inst then return nil end
  instances[id] = nil
  for i, v in ipairs(order) do
    if v == id then table.remove(order, i) break end
  end
  return inst
end

--- list() -> the instances sorted by ID (the order pagination tokens rely on).
function M.list()
  local out = {}
  for _, id in ipairs(order) do out[#out + 1] = instances[id] end
  table.sort(out, function(a, b) return a.id < b.id end)
  return out
end

--- remember(action, token, fingerprint, result) / recall(action, token) -> {fingerprint, result}.
-- ClientToken idempotency: the first successful call with a token fixes its parameters and answer.
function M.remember(action, token, fingerprint, result)
  tokens[action .. "\0" .. token] = { fingerprint = fingerprint, result = result }
end

function M.recall(action, token)
  return tokens[action .. "\0" .. token]
end

--- summary() -> plain table for /_sim/state.
function M.summary()
  local now = clock.now()
  local list = {}
  for _, inst in ipairs(M.list()) do
    list[#list + 1] = { id = inst.id, status = M.status(inst, now), zone = inst.zone, instance_type = inst.type.id,
      capacity_type = inst.spot_strategy == "NoSpot" and "on-demand" or "spot", image_id = inst.image_id,
      -- what the instance costs now (CNY per hour), so tests can tell whether consolidation saved money
      hourly_price = inst.spot_strategy == "NoSpot" and inst.type.price
        or catalogue.spot_price(inst.type, inst.zone, now),
      vswitch_id = inst.vswitch_id, private_ip = inst.ip, security_group_ids = inst.security_group_ids,
      tags = next(inst.tags) and inst.tags or nil, created = luaprov.time.iso8601(inst.created),
      client_token = inst.client_token, spot_strategy = inst.spot_strategy, spot_price_limit = inst.spot_price_limit,
      system_disk = inst.system_disk, data_disks = setmetatable({ table.unpack(inst.data_disks or {}) },
        luaprov.json.array_mt),
      key_pair = inst.key_pair, password_set = inst.password_set, password_inherit = inst.password_inherit,
      resource_group_id = inst.resource_group_id, ram_role = inst.ram_role, http_endpoint = inst.http_endpoint,
      http_tokens = inst.http_tokens, http_put_response_hop_limit = inst.http_put_response_hop_limit,
      launch_template_id = inst.launch_template_id, private_pool = inst.private_pool }
  end
  local total = 0
  for _, n in pairs(calls) do total = total + n end
  return { instances = setmetatable(list, luaprov.json.array_mt), calls = calls, errors = errors,
    total_calls = total }
end

M.reset()

return M
