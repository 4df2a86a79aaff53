#include "script/lua_message.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int lp_lua_message_place(const char *message, char **file, int *line, const char **text) {
  const char *colon = strchr(message, ':');
  if (!colon || colon == message || strchr(" \n[", message[0])) return 0;
  size_t n = (size_t)(colon - message);
  int spaced = memchr(message, ' ', n) != NULL || memchr(message, '\n', n) != NULL;
  if (spaced && (n < 4 || memcmp(colon - 4, ".lua", 4) != 0)) return 0; /* "attempt to ...: 3: x" */
  if (colon[1] < '0' || colon[1] > '9') return 0; /* strtol would take " 3" or "-3" too */
  char *end;
  long l = strtol(colon + 1, &end, 10);
  if (*end != ':' || l <= 0 || l > 1000000) return 0;
  *file = lp_xstrndup(message, n);
  *line = (int)l;
  for (end++; *end == ' '; end++) {
  }
  *text = end;
  return 1;
}
