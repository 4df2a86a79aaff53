/* Where the Kubernetes API server is and how to authenticate to it: a kubeconfig file (development)
 * or the in-cluster service account (the controller's Deployment).
 *
 * The HTTP client takes TLS material as file paths, so `*-data` fields of a kubeconfig are base64
 * decoded into private temporary files (mode 0600, under $TMPDIR or /tmp) that
 * lp_kube_config_free removes. A service-account token is a projected, rotating file: it is read
 * again when its mtime changes, at most once a minute (client-go's habit), see lp_kube_config_token.
 * Not supported yet: exec and auth-provider users, tls-server-name, merging a $KUBECONFIG list.
 * Loop thread only (or any single thread: nothing here touches the loop). */
#ifndef LUAPROV_KUBE_CONFIG_H
#define LUAPROV_KUBE_CONFIG_H

#include <time.h>

#include "core/error.h"

/* Every string is owned by the config; read the fields, never write them. */
typedef struct lp_kube_config {
  char *server;           /* "https://10.0.0.1:443", no trailing slash */
  char *ca_file;          /* PEM bundle path, or NULL for the system bundle */
  char *client_cert_file; /* mTLS client certificate path, or NULL */
  char *client_key_file;
  int insecure_skip_verify;
  char *namespace; /* context (or service account) namespace; NULL when none is named */
  char *source;    /* the kubeconfig path, or the service-account directory */
  /* private: token state and temporary files */
  char *token;      /* static token, or the last one read from token_file */
  char *token_file; /* NULL when the token is static */
  time_t token_mtime;
  long token_mtime_ns;
  double token_checked_at; /* monotonic seconds of the last stat */
  char *temp_files[3];
  int ntemp;
} lp_kube_config;

/* Loads path (YAML or JSON): current-context -> context{cluster, user, namespace} -> cluster{server,
 * certificate-authority | certificate-authority-data, insecure-skip-tls-verify} and user{token |
 * tokenFile, client-certificate[-data], client-key[-data]}. Relative file paths resolve against the
 * kubeconfig's directory. Returns NULL and fills err on failure: code "NotFound" (file missing),
 * "InvalidYAML", or "InvalidConfig" with a message naming the file and the missing or bad field
 * ("kubeconfig /x/config: context \"dev\" has no cluster"). The caller frees the result with
 * lp_kube_config_free. */
lp_kube_config *lp_kube_config_load_file(const char *path, lp_error **err);

/* A config for server (copied) with no credentials and the system trust: the in-process Kubernetes
 * API simulator of `luaprov run --sim`, or an API behind a local authenticating proxy (kubectl proxy).
 * Never fails; free it with lp_kube_config_free. */
lp_kube_config *lp_kube_config_for_server(const char *server, const char *namespace);

/* In-cluster configuration: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (both required; an
 * IPv6 host is bracketed), token and ca.crt (and namespace, optional) from sa_dir, NULL meaning
 * /var/run/secrets/kubernetes.io/serviceaccount. Returns NULL and fills err (code "InvalidConfig")
 * when a variable or the token file is missing. The caller frees it with lp_kube_config_free. */
lp_kube_config *lp_kube_config_in_cluster(const char *sa_dir, lp_error **err);

/* The config a command-line tool uses, found as kubectl finds it: path when not NULL, else
 * $KUBECONFIG (one file; a ':' list is not merged), else ~/.kube/config when it exists, else the
 * in-cluster service account when KUBERNETES_SERVICE_HOST is set. Returns NULL and fills err as the
 * loader it picked does, or code "NotFound" naming all four when none is there. The caller frees the
 * result with lp_kube_config_free. */
lp_kube_config *lp_kube_config_load_default(const char *path, lp_error **err);

/* The bearer token to send, or NULL when the user authenticates with a client certificate. A token
 * read from a file is re-read when the file's mtime changed, checked at most every 60 s; a failed
 * re-read keeps the previous token. The string is owned by cfg and valid until the next call. */
const char *lp_kube_config_token(lp_kube_config *cfg);
/* The same with an explicit monotonic time in seconds (tests). */
const char *lp_kube_config_token_at(lp_kube_config *cfg, double now);

/* Removes the temporary files and frees cfg; NULL is a no-op. */
void lp_kube_config_free(lp_kube_config *cfg);

#endif
