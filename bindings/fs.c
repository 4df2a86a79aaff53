/* luaprov.fs: read-only access to the few files a provider needs (projected service-account and
 * OIDC tokens, mounted secrets), not to the file system. A path is readable when it lies under
 * /var/run/secrets/ or /run/secrets/, or under a prefix the operator lists in LUAPROV_READABLE_PATHS
 * (colon-separated); everything else is "Forbidden". Paths with ".." are refused outright. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luaprov.h"

#define MAX_FILE_BYTES (1u << 20)

static int under_prefix(const char *path, const char *prefix, size_t prefix_len) {
  if (prefix_len == 0 || strncmp(path, prefix, prefix_len) != 0) return 0;
  return prefix[prefix_len - 1] == '/' || path[prefix_len] == '/' || path[prefix_len] == '\0';
}

static int readable(const char *path) {
  static const char *const builtin[] = {"/var/run/secrets/", "/run/secrets/", NULL};
  if (path[0] != '/' || strstr(path, "/../") || strstr(path, "/..\0")) return 0;
  size_t n = strlen(path);
  if (n >= 3 && strcmp(path + n - 3, "/..") == 0) return 0;
  for (const char *const *p = builtin; *p; p++)
    if (under_prefix(path, *p, strlen(*p))) return 1;
  const char *list = getenv("LUAPROV_READABLE_PATHS");
  while (list && *list) {
    const char *end = strchr(list, ':');
    size_t len = end ? (size_t)(end - list) : strlen(list);
    if (len > 0 && list[0] == '/' && under_prefix(path, list, len)) return 1;
    list = end ? end + 1 : NULL;
  }
  return 0;
}

/* luaprov.fs.read(path) -> contents | nil, message, code                    [-1, +(1|3), e]
 * Codes: "Forbidden" (outside the readable prefixes), "NotFound", "TooLarge" (over 1 MiB), "IO". */
static int fs_read(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  if (!readable(path)) {
    lua_pushfstring(L,
                    "%s is not readable by scripts (allowed: /var/run/secrets/, /run/secrets/, and "
                    "LUAPROV_READABLE_PATHS)",
                    path);
    return lp_push_fail(L, lua_tostring(L, -1), "Forbidden");
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    lua_pushfstring(L, "%s: %s", path, strerror(e));
    return lp_push_fail(L, lua_tostring(L, -1), e == ENOENT ? "NotFound" : "IO");
  }
  /* read into Lua memory: a memory error while reading leaks nothing and counts against the cap */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t total = 0, n;
  int too_large = 0;
  char chunk[8192];
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    total += n;
    if (total > MAX_FILE_BYTES) {
      too_large = 1;
      break;
    }
    luaL_addlstring(&b, chunk, n);
  }
  int failed = ferror(f);
  fclose(f);
  if (failed || too_large) {
    lua_pushfstring(L, failed ? "%s: read error" : "%s: larger than 1 MiB", path);
    return lp_push_fail(L, lua_tostring(L, -1), failed ? "IO" : "TooLarge");
  }
  luaL_pushresult(&b);
  return 1;
}

int lp_open_fs(lua_State *L) {
  static const luaL_Reg functions[] = {{"read", fs_read}, {NULL, NULL}};
  luaL_newlib(L, functions);
  return 1;
}
