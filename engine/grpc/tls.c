/* TLS for the gRPC server with OpenSSL: the server context (certificate chain, private key, client
 * certificates required and verified against the CA file, TLS 1.2 or later, ALPN "h2" only) and,
 * per connection, an SSL object between two memory BIOs. libuv owns the socket; OpenSSL never touches
 * it: bytes read are written into rbio, and whatever OpenSSL wants to send is taken from wbio and
 * queued like any other output. That keeps one read path and one write queue for h2c and TLS. */
#include "grpc/grpc_internal.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"

/* TLS 1.2 suites that HTTP/2 allows (RFC 7540 §9.2.2: ephemeral key exchange, AEAD); TLS 1.3 suites
 * are all fine and keep OpenSSL's defaults. */
#define H2_TLS12_CIPHERS                                                                                     \
  "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"                 \
  "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

/* OpenSSL's first queued error, as one line; clears the queue. */
static void openssl_reason(char *out, size_t n, const char *fallback) {
  unsigned long e = ERR_get_error();
  if (e)
    ERR_error_string_n(e, out, n);
  else
    snprintf(out, n, "%s", fallback);
  ERR_clear_error();
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg) {
  static const unsigned char h2[] = {2, 'h', '2'};
  unsigned char *selected;
  if (SSL_select_next_proto(&selected, outlen, h2, sizeof h2, in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL; /* gRPC is HTTP/2 only: refuse http/1.1-only clients */
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *fail(SSL_CTX *ctx, lp_error **err, const char *what, const char *file) {
  char reason[256];
  openssl_reason(reason, sizeof reason, "unknown error");
  lp_error_set(err, "TLS", "gRPC server: %s %s: %s", what, file, reason);
  SSL_CTX_free(ctx);
  return NULL;
}

SSL_CTX *lp_grpc__tls_context(const lp_grpc_server_options *opts, lp_error **err) {
  ERR_clear_error();
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) return fail(NULL, err, "cannot create a TLS context for", opts->cert_file);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  /* HTTP/2 forbids renegotiation and compression (RFC 7540 §9.2.1). */
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_set_cipher_list(ctx, H2_TLS12_CIPHERS) != 1)
    return fail(ctx, err, "cannot set the cipher list for", opts->cert_file);
  if (SSL_CTX_use_certificate_chain_file(ctx, opts->cert_file) != 1)
    return fail(ctx, err, "cannot load the certificate chain", opts->cert_file);
  if (SSL_CTX_use_PrivateKey_file(ctx, opts->key_file, SSL_FILETYPE_PEM) != 1)
    return fail(ctx, err, "cannot load the private key", opts->key_file);
  if (SSL_CTX_check_private_key(ctx) != 1)
    return fail(ctx, err, "the private key does not match the certificate", opts->cert_file);
  if (SSL_CTX_load_verify_locations(ctx, opts->ca_file, NULL) != 1)
    return fail(ctx, err, "cannot load the client CA file", opts->ca_file);
  /* Sent in the CertificateRequest so that a client holding several certificates picks ours. */
  STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(opts->ca_file);
  if (!names) return fail(ctx, err, "no CA certificate in", opts->ca_file);
  SSL_CTX_set_client_CA_list(ctx, names);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  /* Required for session resumption when client certificates are verified. */
  static const unsigned char sid_ctx[] = "luaprov-grpc";
  SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
  SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
  return ctx;
}

void lp_grpc__tls_attach(lp_grpc_conn *c) {
  c->ssl = SSL_new(c->server->tls);
  c->rbio = BIO_new(BIO_s_mem());
  c->wbio = BIO_new(BIO_s_mem());
  if (!c->ssl || !c->rbio || !c->wbio) {
    lp_errorlog("engine.grpc", "out of memory creating a TLS session", LPF_STR("remote", c->remote));
    abort();
  }
  SSL_set_bio(c->ssl, c->rbio, c->wbio);
  SSL_set_accept_state(c->ssl);
}

static void handshake_failed(lp_grpc_conn *c) {
  char reason[256];
  openssl_reason(reason, sizeof reason, "protocol error");
  long verify = SSL_get_verify_result(c->ssl);
  lp_warn("engine.grpc", "TLS handshake failed", LPF_STR("remote", c->remote), LPF_STR("reason", reason),
          verify != X509_V_OK ? LPF_STR("verify", X509_verify_cert_error_string(verify))
                              : (lp_field){.type = LP_FIELD_NONE});
  c->tls_failed = 1;
  c->h2_dead = 1;
  lp_grpc__conn_end(c); /* sends OpenSSL's alert, then closes */
}

/* Returns 0 once TLS is established with h2, 1 while the handshake goes on, -1 when it failed. */
static int handshake(lp_grpc_conn *c) {
  ERR_clear_error();
  int rc = SSL_do_handshake(c->ssl);
  if (rc != 1) {
    if (SSL_get_error(c->ssl, rc) == SSL_ERROR_WANT_READ) return 1;
    handshake_failed(c);
    return -1;
  }
  const unsigned char *proto = NULL;
  unsigned int plen = 0;
  SSL_get0_alpn_selected(c->ssl, &proto, &plen);
  if (plen != 2 || memcmp(proto, "h2", 2) != 0) {
    /* A client that offers no ALPN at all never reaches alpn_select. */
    lp_warn("engine.grpc", "TLS handshake failed", LPF_STR("remote", c->remote),
            LPF_STR("reason", "the client did not negotiate h2 with ALPN"));
    c->h2_dead = 1;
    lp_grpc__conn_end(c);
    return -1;
  }
  c->tls_ready = 1;
  if (lp_log_enabled(LP_LOG_DEBUG)) {
    char subject[256] = "";
    X509 *peer = SSL_get1_peer_certificate(c->ssl);
    if (peer) {
      X509_NAME_oneline(X509_get_subject_name(peer), subject, sizeof subject);
      X509_free(peer);
    }
    lp_debug("engine.grpc", "TLS established", LPF_STR("remote", c->remote),
             LPF_STR("version", SSL_get_version(c->ssl)), LPF_STR("cipher", SSL_get_cipher_name(c->ssl)),
             LPF_STR("client", subject));
  }
  return 0;
}

void lp_grpc__tls_feed(lp_grpc_conn *c, const char *data, size_t len) {
  BIO_write(c->rbio, data, (int)len); /* a memory BIO takes everything */
  if (!c->tls_ready && handshake(c) != 0) return;
  uint8_t plain[16 * 1024];
  while (c->state == LP_GRPC_CONN_OPEN) {
    ERR_clear_error();
    int n = SSL_read(c->ssl, plain, sizeof plain);
    if (n > 0) {
      if (lp_grpc__h2_feed(c, plain, (size_t)n) < 0) {
        c->h2_dead = 1;
        lp_grpc__conn_end(c);
      }
      continue;
    }
    int e = SSL_get_error(c->ssl, n);
    if (e == SSL_ERROR_WANT_READ) return;
    if (e == SSL_ERROR_ZERO_RETURN) {
      lp_debug("engine.grpc", "TLS closed by the client", LPF_STR("remote", c->remote));
      lp_grpc__conn_end(c);
      return;
    }
    char reason[256];
    openssl_reason(reason, sizeof reason, "protocol error");
    lp_warn("engine.grpc", "TLS read failed", LPF_STR("remote", c->remote), LPF_STR("reason", reason));
    c->tls_failed = 1;
    lp_grpc__conn_close(c);
    return;
  }
}

void lp_grpc__tls_write(lp_grpc_conn *c, const uint8_t *data, size_t len) {
  if (data && len && !c->tls_failed) {
    ERR_clear_error();
    /* Into a memory BIO a write is complete or fails outright; it only fails on a broken session. */
    if (SSL_write(c->ssl, data, (int)len) <= 0) {
      char reason[256];
      openssl_reason(reason, sizeof reason, "write failed");
      lp_warn("engine.grpc", "TLS write failed", LPF_STR("remote", c->remote), LPF_STR("reason", reason));
      c->tls_failed = 1;
      c->h2_dead = 1;
    }
  }
  char *p;
  long n = BIO_get_mem_data(c->wbio, &p);
  if (n > 0) {
    lp_grpc__conn_output(c, p, (size_t)n);
    (void)BIO_reset(c->wbio);
  }
}

void lp_grpc__tls_shutdown(lp_grpc_conn *c) {
  if (c->tls_ready && !c->tls_failed) {
    ERR_clear_error();
    SSL_shutdown(c->ssl); /* queues close_notify; the client's answer is not awaited */
    ERR_clear_error();
  }
  lp_grpc__tls_write(c, NULL, 0);
}
