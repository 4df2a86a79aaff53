-- Hourly prices of ECS instance types: on-demand from DescribePrice, spot per zone from
-- DescribeSpotPriceHistory (reference alibaba_openapi.md §4.11). Upstream reads a third-party price
-- server instead (alibaba_provider.md §8.2); the APIs it scrapes are the ones used here.
--
-- Public:
--   fill(c, region, scope, wanted) -> prices, stats
--     wanted = list of {name, spot = bool} in priority order; prices[name] = {od = n|nil, spot = {zone = n}}
--     stats = {calls, cached, skipped}
--   max_calls_per_list, max_seconds_per_list: how many price requests one fill() may make, and for
--     how long (module fields; tests lower them)
--
-- Both APIs take one instance type per request, and luaprov.http gives a script no parallelism (a
-- call is one coroutine; a coroutine the script creates may not do I/O). So prices are fetched one
-- request after another, cached for 30 minutes per type (a type the API has no price for is cached
-- as such, so it is not asked again on every call), and each fill() makes at most
-- max_calls_per_list requests and stops starting new ones after max_seconds_per_list (the engine
-- gives a whole call 60 s): the first call after a cold start prices the most useful types
-- (the caller orders them), the next calls price the rest. A type still without a price keeps its
-- offerings with price nil, which the engine sorts last.
local luaprov = require "luaprov"

local json, log, time = luaprov.json, luaprov.log, luaprov.time

local M = {}

M.max_calls_per_list = 200
M.max_seconds_per_list = 20
M.TTL = 30 * 60
-- A failure that may be transient is retried sooner than a "no price" answer is.
M.FAILURE_TTL = 60

local od_cache = luaprov.cache.new("alibaba-price-ondemand", M.TTL, 100000)
local spot_cache = luaprov.cache.new("alibaba-price-spot", M.TTL, 100000)

local function present(v)
  return v ~= nil and v ~= json.null
end

local function price_of(node)
  if type(node) ~= "table" then return nil end
  local p = tonumber(node.TradePrice) or tonumber(node.DiscountPrice) or tonumber(node.OriginalPrice)
  return p
end

-- The instance's own price: DescribePrice also prices a default system disk, which is not part
-- of what distinguishes one type from another, so prefer the "instanceType" line when present.
local function on_demand_price(body)
  local price = present(body.PriceInfo) and body.PriceInfo.Price
  if type(price) ~= "table" then return nil end
  local details = present(price.DetailInfos) and price.DetailInfos.DetailInfo
  if type(details) == "table" then
    for _, d in ipairs(details) do
      if type(d) == "table" and (d.Resource == "instanceType" or d.Resource == "instance") then
        local p = price_of(d)
        if p then return p end
      end
    end
  end
  return price_of(price)
end

-- The newest SpotPrice per zone: the history lists several points per zone, oldest first.
local function spot_prices(entries, into, newest)
  for _, e in ipairs(entries or {}) do
    if type(e) == "table" and type(e.ZoneId) == "string" and tonumber(e.SpotPrice) then
      local stamp = tostring(e.Timestamp or "")
      if newest[e.ZoneId] == nil or stamp >= newest[e.ZoneId] then
        newest[e.ZoneId] = stamp
        into[e.ZoneId] = tonumber(e.SpotPrice)
      end
    end
  end
end

-- Errors that say "this type has no price here" are an answer; the rest (throttling, transport,
-- auth, server errors) say nothing about the type and stop this round of fetching.
local function is_answer(err)
  local code = err and err.code
  return code ~= "Throttled" and code ~= "Transport" and code ~= "Auth" and code ~= "Credentials"
    and code ~= "InvalidResponse" and not (err.http_status and err.http_status >= 500)
end

local function fetch_on_demand(c, region, name)
  local body, err = c:call("ecs", "DescribePrice", {
    RegionId = region, ResourceType = "instance", InstanceType = name,
    PriceUnit = "Hour", Period = 1, InstanceNetworkType = "vpc",
  })
  if not body then return nil, err end
  return on_demand_price(body) or false
end

-- Pages by Offset/NextOffset; the default window (the last 3 hours) holds few points per zone.
local function fetch_spot(c, region, name)
  local zones, newest = {}, {}
  local params = { RegionId = region, InstanceType = name, NetworkType = "vpc", OSType = "linux" }
  for _ = 1, 5 do
    local body, err = c:call("ecs", "DescribeSpotPriceHistory", params)
    if not body then return nil, err end
    local list = present(body.SpotPrices) and body.SpotPrices.SpotPriceType
    spot_prices(type(list) == "table" and list or nil, zones, newest)
    local next_offset = math.tointeger(body.NextOffset)
    if not next_offset or next_offset <= 0 or next_offset == params.Offset then break end
    params.Offset = next_offset
  end
  return zones
end

function M.fill(c, region, scope, wanted)
  local prices, stats = {}, { calls = 0, cached = 0, skipped = 0 }
  local budget, deadline = M.max_calls_per_list, time.monotonic() + M.max_seconds_per_list
  local stopped
  local function get(cache, key, fetch, name)
    local hit = cache:get(key)
    if hit ~= nil then
      stats.cached = stats.cached + 1
      return hit
    end
    if stopped or stats.calls >= budget or (stats.calls > 0 and time.monotonic() > deadline) then
      stats.skipped = stats.skipped + 1
      return nil
    end
    stats.calls = stats.calls + 1
    local value, err = fetch(c, region, name)
    if value == nil then
      if is_answer(err) then
        cache:set(key, false)
      else
        -- Remember the failure briefly so a throttled account is not hammered by the next call.
        cache:set(key, false, M.FAILURE_TTL)
        stopped = err
      end
      return false
    end
    cache:set(key, value)
    return value
  end

  for _, w in ipairs(wanted) do
    local key = scope .. "|" .. w.name
    local od = get(od_cache, key, fetch_on_demand, w.name)
    local spot = w.spot and get(spot_cache, key, fetch_spot, w.name) or nil
    prices[w.name] = { od = od or nil, spot = type(spot) == "table" and spot or nil }
  end
  if stopped then
    log.warn("alibaba prices incomplete", { error = stopped.message, code = stopped.code })
  end
  return prices, stats
end

return M
