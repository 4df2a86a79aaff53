/* luaprov.crypto: the primitives cloud request signers need (Alibaba RPC and ROA signatures,
 * BizFly's token exchange), on OpenSSL 3's libcrypto.
 *
 * hmac_* return raw bytes, because signers differ in what they do next (Alibaba RPC base64s an
 * HMAC-SHA1, ACS3 hex-encodes an HMAC-SHA256); compose with base64_encode or hex_encode.
 * A failure inside OpenSSL (a provider refusing SHA-1 under a strict policy) is operational:
 * nil, message, "CryptoError". base64 uses the standard alphabet with padding (RFC 4648 §4). */
#include <limits.h>
#include <stddef.h>

#include <lauxlib.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "luaprov.h"

#define RANDOM_MAX_BYTES 1024

static const char hex_digits[] = "0123456789abcdef";
static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void push_hex(lua_State *L, const unsigned char *p, size_t n) {
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, 2 * n);
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex_digits[p[i] >> 4];
    out[2 * i + 1] = hex_digits[p[i] & 15];
  }
  luaL_pushresultsize(&b, 2 * n);
}

/* luaprov.crypto.sha256_hex(s) -> lowercase hex digest | nil, message, "CryptoError"  [-1, +(1|3), m] */
static int crypto_sha256_hex(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (!EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL))
    return lp_push_fail(L, "sha256 failed", "CryptoError");
  push_hex(L, md, mdlen);
  return 1;
}

static int push_hmac(lua_State *L, const EVP_MD *md, const char *name) {
  size_t klen, n;
  const char *key = luaL_checklstring(L, 1, &klen);
  const char *msg = luaL_checklstring(L, 2, &n);
  luaL_argcheck(L, klen <= INT_MAX, 1, "key too long");
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int outlen = 0;
  if (!md || !HMAC(md, key, (int)klen, (const unsigned char *)msg, n, out, &outlen)) {
    lua_pushfstring(L, "%s failed", name);
    return lp_push_fail(L, lua_tostring(L, -1), "CryptoError");
  }
  lua_pushlstring(L, (const char *)out, outlen);
  return 1;
}

/* luaprov.crypto.hmac_sha1(key, msg) -> 20 raw bytes | nil, message, "CryptoError"   [-2, +(1|3), m] */
static int crypto_hmac_sha1(lua_State *L) {
  return push_hmac(L, EVP_sha1(), "hmac_sha1");
}

/* luaprov.crypto.hmac_sha256(key, msg) -> 32 raw bytes | nil, message, "CryptoError" [-2, +(1|3), m] */
static int crypto_hmac_sha256(lua_State *L) {
  return push_hmac(L, EVP_sha256(), "hmac_sha256");
}

/* luaprov.crypto.hex_encode(s) -> lowercase hex                              [-1, +1, m] */
static int crypto_hex_encode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  push_hex(L, (const unsigned char *)s, n);
  return 1;
}

/* luaprov.crypto.base64_encode(s) -> padded base64, no line breaks           [-1, +1, m] */
static int crypto_base64_encode(lua_State *L) {
  size_t n;
  const unsigned char *p = (const unsigned char *)luaL_checklstring(L, 1, &n);
  luaL_argcheck(L, n / 3 < ((size_t)-1) / 4 - 1, 1, "string too long");
  size_t outlen = (n + 2) / 3 * 4;
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, outlen);
  size_t o = 0, i = 0;
  for (; i + 2 < n; i += 3) {
    unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
    out[o++] = b64_alphabet[v >> 18];
    out[o++] = b64_alphabet[(v >> 12) & 63];
    out[o++] = b64_alphabet[(v >> 6) & 63];
    out[o++] = b64_alphabet[v & 63];
  }
  if (i < n) {
    unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0);
    out[o++] = b64_alphabet[v >> 18];
    out[o++] = b64_alphabet[(v >> 12) & 63];
    out[o++] = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
    out[o++] = '=';
  }
  luaL_pushresultsize(&b, o);
  return 1;
}

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* luaprov.crypto.base64_decode(s) -> bytes | nil, message, "InvalidBase64"    [-1, +(1|3), m]
 * Strict RFC 4648: standard alphabet, padding required, no whitespace, except that one trailing
 * newline ("\n" or "\r\n") is ignored, as found at the end of files and `base64` output. Nonzero
 * bits in the last character before the padding are accepted (RFC 4648 §3.5 allows either). */
static int crypto_base64_decode(lua_State *L) {
  size_t n;
  const unsigned char *p = (const unsigned char *)luaL_checklstring(L, 1, &n);
  if (n > 0 && p[n - 1] == '\n') n -= (n > 1 && p[n - 2] == '\r') ? 2 : 1;
  if (n % 4 != 0) {
    lua_pushfstring(L, "invalid base64: length %I is not a multiple of 4", (lua_Integer)n);
    return lp_push_fail(L, lua_tostring(L, -1), "InvalidBase64");
  }
  size_t pad = 0; /* the trailing '=', which only the last quantum may hold */
  if (n > 0 && p[n - 1] == '=') pad = p[n - 2] == '=' ? 2 : 1;
  luaL_Buffer b;
  unsigned char *out = (unsigned char *)luaL_buffinitsize(L, &b, n / 4 * 3);
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    unsigned w = 0;
    for (size_t j = i; j < i + 4; j++) {
      int v = j < n - pad ? b64_value(p[j]) : 0;
      if (v < 0) {
        lua_pushfstring(L, "invalid base64: unexpected %s at byte %I", p[j] == '=' ? "padding" : "character",
                        (lua_Integer)j + 1);
        return lp_push_fail(L, lua_tostring(L, -1), "InvalidBase64");
      }
      w = w << 6 | (unsigned)v;
    }
    size_t keep = i + 4 == n ? 3 - pad : 3;
    out[o++] = (unsigned char)(w >> 16);
    if (keep > 1) out[o++] = (unsigned char)(w >> 8);
    if (keep > 2) out[o++] = (unsigned char)w;
  }
  luaL_pushresultsize(&b, o);
  return 1;
}

/* luaprov.crypto.random_hex(nbytes) -> 2*nbytes hex digits | nil, message, "CryptoError"
 * nbytes is an integer in 1..1024; the bytes come from the CSPRNG.         [-1, +(1|3), v] */
static int crypto_random_hex(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 1 && n <= RANDOM_MAX_BYTES, 1, "must be between 1 and 1024");
  unsigned char bytes[RANDOM_MAX_BYTES];
  if (RAND_bytes(bytes, (int)n) != 1) return lp_push_fail(L, "random generator failed", "CryptoError");
  push_hex(L, bytes, (size_t)n);
  return 1;
}

static const luaL_Reg crypto_funcs[] = {
    {"sha256_hex", crypto_sha256_hex},       {"hmac_sha1", crypto_hmac_sha1},
    {"hmac_sha256", crypto_hmac_sha256},     {"hex_encode", crypto_hex_encode},
    {"base64_encode", crypto_base64_encode}, {"base64_decode", crypto_base64_decode},
    {"random_hex", crypto_random_hex},       {NULL, NULL},
};

int lp_open_crypto(lua_State *L) {
  luaL_newlib(L, crypto_funcs);
  return 1;
}
