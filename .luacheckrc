-- luacheck configuration for the Lua tree: scripts run in the luaprov sandbox (Lua 5.4, no io/os
-- beyond clock/time/date, no debug), specs run under busted.
std = "lua54"
max_line_length = 120
exclude_files = { "build*/**", "node_modules/**" }

files["spec/**/*_spec.lua"] = { std = "+busted" }
files["examples/**/*_spec.lua"] = { std = "+busted" }
-- Arguments named with a leading underscore are part of a contract the function need not use.
unused_args = true
ignore = { "21[23]/_.*" }
