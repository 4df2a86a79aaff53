/* fuzz_json: JSON text to Lua values through bindings/json.c (README.md).
 *
 * Each input is decoded twice in fresh Lua states:
 * 1. with a plain allocator: a value that decodes must encode, the encoding must decode again, and
 *    that must encode to the same bytes (json.h: equal values encode to equal bytes);
 * 2. with a failing lua_Alloc: the Lua state's allocations fail after N of them, N read from the
 *    input's first two bytes (modulo the count pass 1 made). Decoding and encoding then may fail with
 *    an error or a Lua memory error, never crash or leak.
 * jansson keeps the system malloc, as in the engine (which never installs jansson allocators): a
 * failing jansson malloc trips libjansson 2.14's own assertion in lex_unget_unsave (a number token
 * such as "-68547558545555-" whose buffer could not grow), a library quirk, not the project's. */
#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static size_t allocations; /* counted in both passes */
static size_t fail_after;  /* SIZE_MAX: never */

static int may_allocate(void) {
  return ++allocations < fail_after;
}

static void *fuzz_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  /* Lua assumes a shrinking realloc never fails (lua_Alloc in the manual). */
  if ((ptr == NULL || nsize > osize) && !may_allocate()) return NULL;
  return realloc(ptr, nsize);
}

typedef struct input {
  const uint8_t *data;
  size_t size;
  int strict; /* pass 1: failures to re-encode are findings */
} input;

static lp_buf first = LP_BUF_INIT, second = LP_BUF_INIT; /* outside Lua: freed even after a raise */

static void finding(const char *what) {
  fprintf(stderr, "fuzz_json: %s\nfirst:  %.*s\nsecond: %.*s\n", what, (int)first.len,
          first.data ? first.data : "", (int)second.len, second.data ? second.data : "");
  abort();
}

/* Runs under lua_pcall: a memory error raised by a push unwinds to it. */
static int decode_encode(lua_State *L) {
  const input *in = lua_touserdata(L, 1);
  lp_error *err = NULL;
  if (lp_json_push_text(L, (const char *)in->data, in->size, &err)) {
    lp_error_free(err);
    return 0;
  }
  if (lp_json_encode(L, -1, &first, &err)) {
    if (in->strict) fprintf(stderr, "encode: %s\n", err->message);
    lp_error_free(err);
    if (in->strict) finding("a decoded value does not encode");
    return 0;
  }
  if (lp_json_push_text(L, first.data, first.len, &err)) {
    if (in->strict) fprintf(stderr, "decode: %s\n", err->message);
    lp_error_free(err);
    if (in->strict) finding("an encoding does not decode");
    return 0;
  }
  if (lp_json_encode(L, -1, &second, &err)) {
    lp_error_free(err);
    if (in->strict) finding("a re-decoded value does not encode");
    return 0;
  }
  if (in->strict && (first.len != second.len || memcmp(first.data, second.data, first.len) != 0))
    finding("the round trip changed the bytes");
  return 0;
}

static void run(const input *in) {
  lua_State *L = lua_newstate(fuzz_lua_alloc, NULL);
  if (L) {
    lua_pushcfunction(L, decode_encode);
    lua_pushlightuserdata(L, (void *)in);
    (void)lua_pcall(L, 1, 0, 0);
    lua_close(L);
  }
  lp_buf_reset(&first);
  lp_buf_reset(&second);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input in = {data, size, 1};
  allocations = 0;
  fail_after = SIZE_MAX;
  run(&in);
  size_t seen = allocations;
  size_t n = size >= 2 ? (size_t)data[0] | (size_t)data[1] << 8 : 0;
  in.strict = 0;
  allocations = 0;
  fail_after = 1 + n % (seen + 1);
  run(&in);
  fail_after = SIZE_MAX;
  return 0;
}
