/* kubeconfig and in-cluster configuration (see config.h). */
#include "kube/config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/yaml.h"

#define TOKEN_RECHECK_S 60.0
#define DEFAULT_SA_DIR  "/var/run/secrets/kubernetes.io/serviceaccount"

/* Reads a whole small file; NULL with errno set on failure. */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *data = lp_xmalloc(cap);
  size_t got;
  while ((got = fread(data + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (cap - n - 1 == 0) data = lp_xrealloc(data, cap *= 2);
  }
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    free(data);
    errno = EIO;
    return NULL;
  }
  data[n] = '\0';
  if (len) *len = n;
  return data;
}

/* A token file's content without surrounding whitespace. */
static char *trimmed(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
  size_t skip = strspn(s, " \t\r\n");
  if (skip) memmove(s, s + skip, n - skip + 1);
  return s;
}

static int b64_value(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

/* Standard or URL-safe base64, whitespace ignored, padding optional. Returns the decoded bytes
 * (caller frees) or NULL when a character is invalid. */
static unsigned char *b64_decode(const char *in, size_t *out_len) {
  size_t n = strlen(in);
  unsigned char *out = lp_xmalloc(n / 4 * 3 + 3);
  size_t o = 0;
  unsigned acc = 0;
  int bits = 0, pad = 0;
  for (size_t i = 0; i < n; i++) {
    int c = (unsigned char)in[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      pad = 1;
      continue;
    }
    int v = b64_value(c);
    if (v < 0 || pad) {
      free(out);
      return NULL;
    }
    acc = (acc << 6) | (unsigned)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (unsigned char)(acc >> bits);
      acc &= (1u << bits) - 1;
    }
  }
  *out_len = o;
  return out;
}

/* Decodes b64 into a new 0600 temporary file recorded in cfg; returns its path (owned by cfg). */
static const char *data_to_temp(lp_kube_config *cfg, const char *b64, const char *field, lp_error **err) {
  size_t len;
  unsigned char *bytes = b64_decode(b64, &len);
  if (!bytes) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: %s is not valid base64", cfg->source, field);
    return NULL;
  }
  const char *dir = getenv("TMPDIR");
  char *path = lp_xasprintf("%s/luaprov-kube-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path); /* mode 0600 */
  int ok = fd >= 0 && fchmod(fd, 0600) == 0;
  for (size_t off = 0; ok && off < len;) {
    ssize_t w = write(fd, bytes + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      ok = 0;
    else
      off += (size_t)w;
  }
  if (fd >= 0 && close(fd) != 0) ok = 0;
  free(bytes);
  if (!ok) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: cannot write %s to a temporary file: %s", cfg->source,
                 field, strerror(errno));
    if (fd >= 0) unlink(path);
    free(path);
    return NULL;
  }
  cfg->temp_files[cfg->ntemp++] = path;
  return path;
}

static char *resolve(const char *dir, const char *p) {
  return p[0] == '/' ? lp_xstrdup(p) : lp_xasprintf("%s/%s", dir, p);
}

/* The entry of list (clusters, contexts, users) named name, its `inner` object. */
static json_t *named(json_t *root, const char *list, const char *name, const char *inner) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(root, list), i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    if (n && strcmp(n, name) == 0) return json_object_get(e, inner);
  }
  return NULL;
}

static const char *str_field(json_t *obj, const char *key) {
  const char *s = json_string_value(json_object_get(obj, key));
  return s && *s ? s : NULL;
}

/* Reads a file or inline-data pair of obj (e.g. client-certificate / client-certificate-data) into
 * *out (a path). Returns 0 (also when neither is present) or -1 with err. */
static int file_or_data(lp_kube_config *cfg, const char *dir, json_t *obj, const char *field, char **out,
                        lp_error **err) {
  char data_key[64];
  snprintf(data_key, sizeof data_key, "%s-data", field);
  const char *data = str_field(obj, data_key), *file = str_field(obj, field);
  if (data) {
    const char *p = data_to_temp(cfg, data, data_key, err);
    if (!p) return -1;
    *out = lp_xstrdup(p);
  } else if (file) {
    *out = resolve(dir, file);
  }
  return 0;
}

static int load_token_file(lp_kube_config *cfg, lp_error **err) {
  struct stat st;
  char *text = NULL;
  if (stat(cfg->token_file, &st) != 0 || !(text = read_file(cfg->token_file, NULL))) {
    lp_error_set(err, "InvalidConfig", "%s: cannot read token file %s: %s", cfg->source, cfg->token_file,
                 strerror(errno));
    return -1;
  }
  free(cfg->token);
  cfg->token = lp_xstrdup(trimmed(text));
  free(text);
  cfg->token_mtime = st.st_mtim.tv_sec;
  cfg->token_mtime_ns = st.st_mtim.tv_nsec;
  cfg->token_checked_at = lp_clock_monotonic();
  return 0;
}

static int fill_from_kubeconfig(lp_kube_config *cfg, json_t *root, const char *dir, lp_error **err) {
  const char *src = cfg->source;
  const char *ctx_name = str_field(root, "current-context");
  if (!ctx_name) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: no current-context", src);
    return -1;
  }
  json_t *ctx = named(root, "contexts", ctx_name, "context");
  if (!json_is_object(ctx)) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: current-context \"%s\" names no entry in contexts",
                 src, ctx_name);
    return -1;
  }
  const char *cluster_name = str_field(ctx, "cluster"), *user_name = str_field(ctx, "user");
  if (!cluster_name) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: context \"%s\" has no cluster", src, ctx_name);
    return -1;
  }
  if (str_field(ctx, "namespace")) cfg->namespace = lp_xstrdup(str_field(ctx, "namespace"));
  json_t *cluster = named(root, "clusters", cluster_name, "cluster");
  if (!json_is_object(cluster)) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: cluster \"%s\" not found in clusters", src,
                 cluster_name);
    return -1;
  }
  const char *server = str_field(cluster, "server");
  if (!server) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: cluster \"%s\" has no server", src, cluster_name);
    return -1;
  }
  cfg->server = lp_xstrdup(server);
  size_t n = strlen(cfg->server);
  while (n && cfg->server[n - 1] == '/') cfg->server[--n] = '\0';
  cfg->insecure_skip_verify = json_is_true(json_object_get(cluster, "insecure-skip-tls-verify"));
  if (file_or_data(cfg, dir, cluster, "certificate-authority", &cfg->ca_file, err)) return -1;
  if (!user_name) return 0; /* anonymous */
  json_t *user = named(root, "users", user_name, "user");
  if (!json_is_object(user)) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: user \"%s\" not found in users", src, user_name);
    return -1;
  }
  if (json_object_get(user, "exec") || json_object_get(user, "auth-provider")) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: user \"%s\": exec and auth-provider are not supported",
                 src, user_name);
    return -1;
  }
  if (file_or_data(cfg, dir, user, "client-certificate", &cfg->client_cert_file, err)) return -1;
  if (file_or_data(cfg, dir, user, "client-key", &cfg->client_key_file, err)) return -1;
  if (!cfg->client_cert_file != !cfg->client_key_file) {
    lp_error_set(err, "InvalidConfig", "kubeconfig %s: user \"%s\" has %s without %s", src, user_name,
                 cfg->client_cert_file ? "client-certificate" : "client-key",
                 cfg->client_cert_file ? "client-key" : "client-certificate");
    return -1;
  }
  if (str_field(user, "token")) {
    cfg->token = lp_xstrdup(str_field(user, "token"));
  } else if (str_field(user, "tokenFile")) {
    cfg->token_file = resolve(dir, str_field(user, "tokenFile"));
    if (load_token_file(cfg, err)) return -1;
  }
  return 0;
}

lp_kube_config *lp_kube_config_load_file(const char *path, lp_error **err) {
  json_t *root = lp_load_json_or_yaml_file(path, err);
  if (!root) return NULL;
  lp_kube_config *cfg = lp_xcalloc(1, sizeof *cfg);
  cfg->source = lp_xstrdup(path);
  const char *slash = strrchr(path, '/');
  char *dir = slash ? lp_xstrndup(path, slash == path ? 1 : (size_t)(slash - path)) : lp_xstrdup(".");
  int rc = json_is_object(root) ? fill_from_kubeconfig(cfg, root, dir, err) : -1;
  if (!json_is_object(root)) lp_error_set(err, "InvalidConfig", "kubeconfig %s: not a mapping", path);
  free(dir);
  json_decref(root);
  if (rc) {
    lp_kube_config_free(cfg);
    return NULL;
  }
  return cfg;
}

lp_kube_config *lp_kube_config_for_server(const char *server, const char *namespace) {
  lp_kube_config *cfg = lp_xcalloc(1, sizeof *cfg);
  cfg->server = lp_xstrdup(server);
  cfg->namespace = namespace ? lp_xstrdup(namespace) : NULL;
  cfg->source = lp_xstrdup(server);
  return cfg;
}

lp_kube_config *lp_kube_config_in_cluster(const char *sa_dir, lp_error **err) {
  const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port) {
    lp_error_set(err, "InvalidConfig",
                 "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                 "must both be set");
    return NULL;
  }
  if (!sa_dir) sa_dir = DEFAULT_SA_DIR;
  lp_kube_config *cfg = lp_xcalloc(1, sizeof *cfg);
  cfg->source = lp_xstrdup(sa_dir);
  cfg->server = strchr(host, ':') && host[0] != '[' ? lp_xasprintf("https://[%s]:%s", host, port)
                                                    : lp_xasprintf("https://%s:%s", host, port);
  cfg->token_file = lp_xasprintf("%s/token", sa_dir);
  if (load_token_file(cfg, err)) {
    lp_kube_config_free(cfg);
    return NULL;
  }
  char *ca = lp_xasprintf("%s/ca.crt", sa_dir);
  if (access(ca, R_OK) == 0)
    cfg->ca_file = ca;
  else
    free(ca);
  char *ns_path = lp_xasprintf("%s/namespace", sa_dir);
  char *ns = read_file(ns_path, NULL);
  free(ns_path);
  if (ns && *trimmed(ns)) cfg->namespace = lp_xstrdup(ns);
  free(ns);
  return cfg;
}

lp_kube_config *lp_kube_config_load_default(const char *path, lp_error **err) {
  if (path) return lp_kube_config_load_file(path, err);
  const char *env = getenv("KUBECONFIG"), *home = getenv("HOME"), *host = getenv("KUBERNETES_SERVICE_HOST");
  if (env && *env) return lp_kube_config_load_file(env, err);
  char *user = home && *home ? lp_xasprintf("%s/.kube/config", home) : NULL;
  lp_kube_config *cfg = NULL;
  if (user && access(user, F_OK) == 0)
    cfg = lp_kube_config_load_file(user, err);
  else if (host && *host)
    cfg = lp_kube_config_in_cluster(NULL, err);
  else
    lp_error_set(err, "NotFound",
                 "no Kubernetes API configured: pass --kubeconfig FILE, set KUBECONFIG, create %s, or run in "
                 "a Pod (KUBERNETES_SERVICE_HOST)",
                 user ? user : "~/.kube/config");
  free(user);
  return cfg;
}

const char *lp_kube_config_token_at(lp_kube_config *cfg, double now) {
  if (!cfg->token_file || now - cfg->token_checked_at < TOKEN_RECHECK_S) return cfg->token;
  cfg->token_checked_at = now;
  struct stat st;
  if (stat(cfg->token_file, &st) != 0) return cfg->token;
  if (st.st_mtim.tv_sec == cfg->token_mtime && st.st_mtim.tv_nsec == cfg->token_mtime_ns) return cfg->token;
  char *text = read_file(cfg->token_file, NULL);
  if (!text) return cfg->token;
  if (*trimmed(text)) {
    free(cfg->token);
    cfg->token = lp_xstrdup(text);
    cfg->token_mtime = st.st_mtim.tv_sec;
    cfg->token_mtime_ns = st.st_mtim.tv_nsec;
  }
  free(text);
  return cfg->token;
}

const char *lp_kube_config_token(lp_kube_config *cfg) {
  return lp_kube_config_token_at(cfg, lp_clock_monotonic());
}

void lp_kube_config_free(lp_kube_config *cfg) {
  if (!cfg) return;
  for (int i = 0; i < cfg->ntemp; i++) {
    unlink(cfg->temp_files[i]);
    free(cfg->temp_files[i]);
  }
  free(cfg->server);
  free(cfg->ca_file);
  free(cfg->client_cert_file);
  free(cfg->client_key_file);
  free(cfg->namespace);
  free(cfg->source);
  free(cfg->token);
  free(cfg->token_file);
  free(cfg);
}
