#!/bin/sh
# Writes throw-away test certificates for the gRPC server's mTLS tests into DIR:
#   ca.pem ca.key              the CA both sides trust
#   server.pem server.key      signed by ca, SAN IP:127.0.0.1 and DNS:localhost, serverAuth
#                              (the CA's Go client checks the address host against the SAN)
#   client.pem client.key      signed by ca, clientAuth
#   other-ca.pem other-ca.key  an unrelated CA
#   other-client.pem/.key      a client certificate signed by other-ca: the server must refuse it
# usage: spec/grpc/make_certs.sh DIR    (used by spec/c/test_grpc_server.c and transport_test.js)
set -eu

dir="${1:?usage: make_certs.sh DIR}"
mkdir -p "$dir"
cd "$dir"

# P-256 keys: fast to generate, and every TLS stack involved (OpenSSL, Node, Go) supports them.
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() { # name CN
  key "$1.key"
  cat >"$1.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
x509_extensions = ext
[dn]
CN = $2
[ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
  openssl req -x509 -new -key "$1.key" -config "$1.cnf" -days 2 -out "$1.pem"
}

leaf() { # name CN issuer extensions
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$4" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

ca ca luaprov-test-ca
ca other-ca luaprov-other-ca
leaf server localhost ca "basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost"
leaf client luaprov-test-client ca "basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth"
leaf other-client luaprov-other-client other-ca "basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth"
rm -f ./*.cnf ./*.srl
