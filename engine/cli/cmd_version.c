#include <lua.h>
#include <stdio.h>
#include <string.h>
#include <curl/curl.h>
#include <uv.h>

#include "cli/cli.h"
#include "luaprov_version.h"

int lp_cmd_version(int argc, char **argv) {
  lp_cli_args a = {.cmd = "version"};
  int parsed = lp_cli_parse(&a, argc, argv);
  if (parsed == LP_CLI_USAGE) return 2;
  if (parsed == LP_CLI_HELP) {
    puts("usage: luaprov version\n\nPrints the luaprov version and the versions of Lua, libuv and libcurl it "
         "runs on.");
    return 0;
  }
  printf("luaprov %s (%s, libuv %s, %s)\n", LUAPROV_VERSION, LUA_RELEASE, uv_version_string(),
         curl_version());
  return 0;
}
