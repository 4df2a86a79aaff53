-- The flavors the simulated Bizfly region sells, with what the API tells about each in a pool's
-- flavor_detail ({name, vcpus, ram in MiB, gpu, category}).
-- Names follow Bizfly's two styles: "nix.<cpu>c_<mem>g" and "<cpu>c_<mem>g_<profile>".
-- A flavor not in this table (a pool on a retired or bare-metal flavor) gets no flavor_detail.
local luaprov = require "luaprov"

local M = {}

local FLAVORS = {
  ["nix.2c_2g"] = { vcpus = 2, ram = 2048, category = "nix" },
  ["nix.2c_4g"] = { vcpus = 2, ram = 4096, category = "nix" },
  ["nix.4c_8g"] = { vcpus = 4, ram = 8192, category = "nix" },
  ["nix.8c_16g"] = { vcpus = 8, ram = 16384, category = "nix" },
  ["nix.16c_32g"] = { vcpus = 16, ram = 32768, category = "nix" },
  ["2c_4g_premium"] = { vcpus = 2, ram = 4096, category = "premium" },
  ["4c_8g_premium"] = { vcpus = 4, ram = 8192, category = "premium" },
  ["3c_6g_enterprise"] = { vcpus = 3, ram = 6144, category = "enterprise" },
  ["8c_16g_enterprise"] = { vcpus = 8, ram = 16384, category = "enterprise" },
  ["nix.8c_32g_1gpu"] = { vcpus = 8, ram = 32768, category = "gpu", gpu = { count = 1, model = "NVIDIA Tesla T4" } },
}

-- The flavors synthetic clusters cycle through (no GPU: a benchmark measures the engine, not stock).
M.GENERAL = { "nix.2c_4g", "nix.4c_8g", "nix.8c_16g", "4c_8g_premium", "3c_6g_enterprise", "8c_16g_enterprise" }

function M.known(name)
  return FLAVORS[name] ~= nil
end

--- detail(name) -> the flavor_detail object of a pool on this flavor, or nil when unknown.
function M.detail(name)
  local f = FLAVORS[name]
  if not f then return nil end
  local gpu = f.gpu and { count = f.gpu.count, model = f.gpu.model } or luaprov.json.null
  return { name = name, vcpus = f.vcpus, ram = f.ram, gpu = gpu, category = f.category }
end

function M.vcpus(name)
  local f = FLAVORS[name]
  return f and f.vcpus or 0
end

return M
