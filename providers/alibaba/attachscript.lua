-- The ACK attach script of a cluster: the one-line command a new ECS instance runs to join an ACK
-- managed cluster, from the Container Service's DescribeClusterAttachScripts (ROA, POST
-- /clusters/{ClusterId}/attachscript), with its container runtime set to the one the cluster's node
-- pools run (runtime.lua: ACK may name docker where Kubernetes has none), cached 6 hours per
-- (endpoint, region, cluster, format_disk). A failed DescribeClusterNodePools never fails get: the
-- script is used as ACK answered it, and the next get asks the node pools again (not the script)
-- until they answer.
--
--   get(ctx, cluster_id, format_disk) -> script | nil, err
--   TTL          seconds an answer is reused (6 h)
--   clock        function() -> seconds: the time cache entries are dated and aged with (the
--                engine's clock by default; specs replace it to step over the 6 hours)
--   WAIT         seconds a get waits for another get of the same script in flight before asking
--                itself (the launches of a scale-up run together: one asks, the others wait for it)
--
-- err is the client's error table ({code, message, action = "DescribeClusterAttachScripts",
-- request_id, http_status}); its code is never "InsufficientCapacity": a cluster that cannot hand out
-- its script says nothing about an offering's capacity.
local luaprov = require "luaprov"
local runtime = require "providers.alibaba.runtime"
local session = require "providers.alibaba.session"

local M = {}

M.ACTION = "DescribeClusterAttachScripts"
M.TTL = 6 * 3600
M.clock = luaprov.time.now

-- The luaprov.cache TTL only bounds memory (it runs on the engine's monotonic clock); freshness is
-- decided by the age of the entry on M.clock.
local cache = luaprov.cache.new("alibaba-attach-script", M.TTL, 1000)
-- The keys a get is asking the APIs for now. Every script runs on one thread, so a get and a set with
-- no call between them cannot interleave with another call; an entry left by a call that never
-- finished (a wall-clock timeout) expires after WAIT.
M.WAIT = 15
local POLL = 0.05
local inflight = luaprov.cache.new("alibaba-attach-script-inflight", M.WAIT, 1000)

local function key_of(ctx, cluster_id, format_disk)
  return table.concat({ ctx.endpoint or luaprov.env("LUAPROV_ALIBABA_ENDPOINT") or "", ctx.region or "",
    cluster_id, format_disk and "format" or "keep" }, "\0")
end

-- The answer is the command as a JSON string (or plain text): line breaks the API puts in ("\r\n")
-- are removed, as is the space around it.
local function clean(value)
  if type(value) ~= "string" then return nil end
  return (value:gsub("\r\n", ""):gsub("^%s+", ""):gsub("%s+$", ""))
end

-- The entry's script with the node pools' runtime, stored back (the cache keeps copies): asked once,
-- then again only while the node pool call keeps failing (entry.settled false).
local function corrected(c, key, cluster_id, entry)
  entry.script, entry.settled = runtime.correct(c, cluster_id, entry.raw)
  cache:set(key, entry)
  return entry.script
end

local function get_now(ctx, cluster_id, format_disk, key)
  local now = M.clock()
  local hit = cache:get(key)
  local c, err
  if type(hit) == "table" and type(hit.raw) == "string" and type(hit.at) == "number"
      and now >= hit.at and now - hit.at < M.TTL then
    if hit.settled then return hit.script end
    c = session.client(ctx)
    if not c then return hit.raw end
    return corrected(c, key, cluster_id, hit)
  end
  c, err = session.client(ctx)
  if not c then
    err.action = M.ACTION
    return nil, err
  end
  local value, request_id = c:roa("cs", M.ACTION, {
    method = "POST",
    path = "/clusters/" .. cluster_id .. "/attachscript",
    body = { keep_instance_name = true, format_disk = format_disk and true or false },
  })
  if value == nil then
    err = request_id
    if err.code == "InsufficientCapacity" then err.code = err.api_code or "CreateError" end
    err.message = ("ACK cluster %s: %s"):format(cluster_id, err.message)
    return nil, err
  end
  local script = clean(value)
  if not script or script == "" then
    return nil, { code = "InvalidResponse", action = M.ACTION, request_id = request_id,
      message = ("ACK cluster %s: %s: the attach script is empty (RequestId %s)"):format(cluster_id, M.ACTION,
        request_id or "none") }
  end
  luaprov.log.info("alibaba attach script fetched", { cluster_id = cluster_id, format_disk = format_disk and true
    or false, request_id = request_id, cached_for_s = M.TTL })
  return corrected(c, key, cluster_id, { raw = script, at = now })
end

function M.get(ctx, cluster_id, format_disk)
  ctx = ctx or {}
  local key = key_of(ctx, cluster_id, format_disk)
  -- another get of this scale-up is asking: wait for its answer (then cached) instead of asking too;
  -- when it failed, the first waiter to wake asks, and the others wait for that one
  local deadline = luaprov.time.now() + M.WAIT
  while inflight:get(key) and luaprov.time.now() < deadline do luaprov.time.sleep(POLL) end
  inflight:set(key, true)
  local script, err = get_now(ctx, cluster_id, format_disk, key)
  inflight:delete(key)
  return script, err
end

return M
