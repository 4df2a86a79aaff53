# A real Kubernetes control plane on loopback for the end-to-end tests (sourced by lib.sh): etcd,
# kube-apiserver (RBAC, service-account tokens, an audit log of luaprov's requests),
# kube-controller-manager and kube-scheduler, built by tools/install-e2e.sh. Ports are picked free,
# certificates are made here with openssl, and every process is stopped by PID when the test ends,
# whether it passed or not.
#
# After cluster_up:
#   CLUSTER            the folder holding the certificates, logs, etcd data and kubeconfigs
#   ADMIN_KUBECONFIG   system:masters (the tests, kubectl, the simulated kubelet)
#   API_SERVER         https://127.0.0.1:PORT
#   AUDIT_LOG          one JSON line per request luaprov's ServiceAccount made
#   kc ARGS...         kubectl as the admin

E2E_BIN="${LUAPROV_E2E_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.cache/e2e/bin}"
CLUSTER_PIDS=()
# luaprov's identity when it runs as the ServiceAccount of examples/deploy/rbac.yaml
LUAPROV_USER="system:serviceaccount:luaprov:luaprov"

kc() { "$E2E_BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# free_port: a TCP port nothing listens on, below the ephemeral range so outgoing connections do not
# take it meanwhile.
free_port() {
  local port
  for _ in $(seq 1 100); do
    port=$((20000 + RANDOM % 12000))
    if [[ -z "$(ss -Htln "sport = :$port")" ]] && [[ " ${E2E_PORTS_TAKEN:-} " != *" $port "* ]]; then
      E2E_PORTS_TAKEN="${E2E_PORTS_TAKEN:-} $port"
      echo "$port"
      return 0
    fi
  done
  fail "no free port found"
}

# make_cert NAME SUBJECT [SANS]: a key and a certificate signed by the cluster CA.
make_cert() {
  local name="$1" subject="$2" sans="${3:-}"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$CLUSTER/$name.key" -subj "$subject" \
    -out "$CLUSTER/$name.csr" 2>/dev/null
  local ext="$CLUSTER/$name.ext"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n' >"$ext"
  if [[ -n "$sans" ]]; then
    printf 'extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$sans" >>"$ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' >>"$ext"
  fi
  openssl x509 -req -in "$CLUSTER/$name.csr" -CA "$CLUSTER/ca.crt" -CAkey "$CLUSTER/ca.key" -CAcreateserial \
    -days 2 -sha256 -extfile "$ext" -out "$CLUSTER/$name.crt" 2>/dev/null
}

# kubeconfig FILE USER NAMESPACE CREDENTIALS: a kubeconfig for this cluster; CREDENTIALS is the user's
# entry as a YAML flow mapping.
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "$API_SERVER", certificate-authority: "$CLUSTER/ca.crt"}
users:
- name: $2
  user: $4
contexts:
- name: e2e
  context: {cluster: e2e, user: $2, namespace: $3}
current-context: e2e
EOF
}

# write_kubeconfig FILE NAME: a kubeconfig for the client certificate NAME.crt.
write_kubeconfig() {
  kubeconfig "$1" "$2" default "{client-certificate: \"$CLUSTER/$2.crt\", client-key: \"$CLUSTER/$2.key\"}"
}

# token_kubeconfig FILE NAMESPACE SERVICEACCOUNT: a kubeconfig with a token from the TokenRequest API.
token_kubeconfig() {
  local token
  token="$(kc create token "$3" -n "$2" --duration 24h)" || fail "TokenRequest for $2/$3"
  kubeconfig "$1" "$3" "$2" "{token: \"$token\"}"
}

# spawn NAME COMMAND...: starts a component in the background, its output in $CLUSTER/NAME.log.
spawn() {
  local name="$1"
  shift
  "$@" >"$CLUSTER/$name.log" 2>&1 &
  CLUSTER_PIDS+=("$!")
  watch_pid "$!"
  eval "PID_${name//-/_}=$!"
}

api_ready() {
  [[ "$(curl -s --cacert "$CLUSTER/ca.crt" --cert "$CLUSTER/admin.crt" --key "$CLUSTER/admin.key" \
    "$API_SERVER/readyz")" == "ok" ]]
}

# wait_until DESCRIPTION SECONDS COMMAND...: retries COMMAND every 0.2 s.
wait_until() {
  local what="$1" secs="$2"
  shift 2
  local deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    "$@" && return 0
    sleep 0.2
  done
  fail "timed out after ${secs}s waiting for: $what"
}

# start_apiserver: (re)starts kube-apiserver on API_PORT; used again by tests that kill it.
start_apiserver() {
  spawn kube-apiserver "$E2E_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --cert-dir "$CLUSTER/apiserver" \
    --tls-cert-file "$CLUSTER/apiserver.crt" --tls-private-key-file "$CLUSTER/apiserver.key" \
    --client-ca-file "$CLUSTER/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --api-audiences https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$CLUSTER/sa.pub" --service-account-signing-key-file "$CLUSTER/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --authorization-mode Node,RBAC \
    --audit-policy-file "$CLUSTER/audit-policy.yaml" --audit-log-path "$AUDIT_LOG" \
    --audit-log-mode blocking --audit-log-format json \
    --profiling=false --v 1
  wait_until "kube-apiserver /readyz" 90 api_ready
}

cluster_up() {
  [[ -x "$E2E_BIN/kube-apiserver" && -x "$E2E_BIN/etcd" ]] \
    || fail "the control plane is not built: run tools/install-e2e.sh (make test does)"
  CLUSTER="$WORK/cluster"
  mkdir -p "$CLUSTER/apiserver"
  ETCD_PORT="$(free_port)"
  local etcd_peer
  etcd_peer="$(free_port)"
  API_PORT="$(free_port)"
  API_SERVER="https://127.0.0.1:$API_PORT"
  ADMIN_KUBECONFIG="$CLUSTER/admin.kubeconfig"
  AUDIT_LOG="$CLUSTER/audit.log"

  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=luaprov-e2e-ca" -keyout "$CLUSTER/ca.key" \
    -out "$CLUSTER/ca.crt" 2>/dev/null
  make_cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  make_cert admin "/O=system:masters/CN=e2e-admin"
  make_cert controller-manager "/CN=system:kube-controller-manager"
  make_cert scheduler "/CN=system:kube-scheduler"
  openssl genrsa -out "$CLUSTER/sa.key" 2048 2>/dev/null
  openssl rsa -in "$CLUSTER/sa.key" -pubout -out "$CLUSTER/sa.pub" 2>/dev/null
  write_kubeconfig "$ADMIN_KUBECONFIG" admin
  write_kubeconfig "$CLUSTER/controller-manager.kubeconfig" controller-manager
  write_kubeconfig "$CLUSTER/scheduler.kubeconfig" scheduler
  # Only luaprov's requests are recorded: the RBAC checks read what it asked and what it was answered.
  cat >"$CLUSTER/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["$LUAPROV_USER"]
- level: None
EOF

  spawn etcd "$E2E_BIN/etcd" --name e2e --data-dir "$CLUSTER/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "e2e=http://127.0.0.1:$etcd_peer" --log-level warn
  wait_until "etcd /health" 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health" -o /dev/null
  start_apiserver
  spawn kube-controller-manager "$E2E_BIN/kube-controller-manager" \
    --kubeconfig "$CLUSTER/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$CLUSTER/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$CLUSTER/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
    --service-account-private-key-file "$CLUSTER/sa.key" --root-ca-file "$CLUSTER/ca.crt" \
    --use-service-account-credentials --v 1
  spawn kube-scheduler "$E2E_BIN/kube-scheduler" --kubeconfig "$CLUSTER/scheduler.kubeconfig" \
    --authentication-kubeconfig "$CLUSTER/scheduler.kubeconfig" \
    --authorization-kubeconfig "$CLUSTER/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false --v 1
  # the service-account controller runs: pods can be admitted in the default namespace
  wait_until "the default ServiceAccount" 60 has_default_serviceaccount
}

has_default_serviceaccount() { kc get serviceaccount default -o name >/dev/null 2>&1; }

# cluster_down: stops every component by PID (TERM, then KILL after 10 s), newest first.
cluster_down() {
  local i pid
  for ((i = ${#CLUSTER_PIDS[@]} - 1; i >= 0; i--)); do
    pid="${CLUSTER_PIDS[$i]}"
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${CLUSTER_PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  CLUSTER_PIDS=()
}
