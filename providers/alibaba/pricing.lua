-- Hourly prices of ECS instance types: on-demand from DescribePrice, spot per zone from
-- DescribeSpotPriceHistory. Upstream reads a third-party price server instead; the APIs it
-- scrapes are the ones used here.
--
-- Public:
--   fill(c, region, scope, wanted) -> prices, stats
--     wanted = list of {name, spot = bool} in priority order; prices[name] = {od = n|nil, spot = {zone = n}}
--     stats = {calls, cached, skipped}
--   max_calls_per_list, concurrency: how many price requests one fill() may make, and how many run at
--     once (module fields; tests lower them)
--
-- Both APIs take one instance type per request, so the missing prices are fetched together through
-- client:call_all (luaprov.http.request_all), at most M.concurrency requests in flight, and cached for
-- 30 minutes per type (a type the API has no price for is cached as such, so it is not asked again on
-- every call). Each fill() makes at most max_calls_per_list requests: the first call after a cold
-- start prices the most useful types (the caller orders them), the next calls price the rest; the
-- engine also calls the mapping's refresh_prices in the background so callers rarely wait. A type
-- still without a price keeps its offerings with price nil, which the engine sorts last.
local luaprov = require "luaprov"

local json, log = luaprov.json, luaprov.log

local M = {}

M.max_calls_per_list = 4000
M.concurrency = 16
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

local function on_demand_params(region, name)
  return { RegionId = region, ResourceType = "instance", InstanceType = name, PriceUnit = "Hour", Period = 1,
    InstanceNetworkType = "vpc" }
end

-- Spot history pages by Offset/NextOffset; the default window (the last 3 hours) holds few points per
-- zone, so the first page is fetched for all types at once and the rare further pages one by one.
local function spot_params(region, name)
  return { RegionId = region, InstanceType = name, NetworkType = "vpc", OSType = "linux" }
end

local function spot_zones(c, params, body)
  local zones, newest = {}, {}
  for _ = 1, 5 do
    local list = present(body.SpotPrices) and body.SpotPrices.SpotPriceType
    spot_prices(type(list) == "table" and list or nil, zones, newest)
    local next_offset = math.tointeger(body.NextOffset)
    if not next_offset or next_offset <= 0 or next_offset == params.Offset then break end
    params.Offset = next_offset
    local err
    body, err = c:call("ecs", "DescribeSpotPriceHistory", params)
    if not body then return nil, err end
  end
  return zones
end

function M.fill(c, region, scope, wanted)
  local prices, stats = {}, { calls = 0, cached = 0, skipped = 0 }
  local found = {} -- key -> {od = value|false|nil, spot = value|false|nil}
  local ask_od, ask_spot = {}, {}
  for _, w in ipairs(wanted) do
    local key = scope .. "|" .. w.name
    local entry = { od = od_cache:get(key), spot = w.spot and spot_cache:get(key) or nil }
    found[w.name] = entry
    if entry.od ~= nil then stats.cached = stats.cached + 1
    elseif stats.calls < M.max_calls_per_list then
      stats.calls = stats.calls + 1
      ask_od[#ask_od + 1] = w.name
    else stats.skipped = stats.skipped + 1 end
    if w.spot then
      if entry.spot ~= nil then stats.cached = stats.cached + 1
      elseif stats.calls < M.max_calls_per_list then
        stats.calls = stats.calls + 1
        ask_spot[#ask_spot + 1] = w.name
      else stats.skipped = stats.skipped + 1 end
    end
  end

  local stopped
  local function remember(cache, key, value, err)
    if value ~= nil then
      cache:set(key, value)
      return value
    end
    if is_answer(err) then
      cache:set(key, false)
    else
      -- Remember the failure briefly so a throttled account is not hammered by the next call.
      cache:set(key, false, M.FAILURE_TTL)
      stopped = stopped or err
    end
    return false
  end

  local od_list = {}
  for i, name in ipairs(ask_od) do od_list[i] = on_demand_params(region, name) end
  for i, r in ipairs(c:call_all("ecs", "DescribePrice", od_list, { concurrency = M.concurrency })) do
    local name = ask_od[i]
    local value = not r.error and (on_demand_price(r) or false) or nil
    found[name].od = remember(od_cache, scope .. "|" .. name, value, r.error)
  end
  local spot_list = {}
  for i, name in ipairs(ask_spot) do spot_list[i] = spot_params(region, name) end
  for i, r in ipairs(c:call_all("ecs", "DescribeSpotPriceHistory", spot_list, { concurrency = M.concurrency })) do
    local name = ask_spot[i]
    local zones, err = nil, r.error
    if not err then zones, err = spot_zones(c, spot_list[i], r) end
    found[name].spot = remember(spot_cache, scope .. "|" .. name, zones, err)
  end

  for _, w in ipairs(wanted) do
    local entry = found[w.name]
    prices[w.name] = { od = entry.od or nil, spot = type(entry.spot) == "table" and entry.spot or nil }
  end
  if stopped then
    log.warn("alibaba prices incomplete", { error = stopped.message, code = stopped.code })
  end
  return prices, stats
end

return M
