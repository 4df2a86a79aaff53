#!/usr/bin/env bash
# The command line's usage errors (engine/cli/args.h, docs/troubleshooting.md): every command takes the
# same flags, a usage error is one line plus the --help hint with exit 2, --help exits 0; and
# `eval --now` is the time a time-dependent policy sees.
source "$(dirname "$0")/lib.sh"
F="$LUAPROV_SOURCE_DIR/spec/fixtures/eval"

usage_error() { # usage_error EXPECTED_FIRST_LINE ARGS...: exit 2, that line, then the hint, nothing else
  local want="$1" status=0
  shift
  "$LUAPROV" "$@" >"$WORK/out" 2>"$WORK/err" || status=$?
  [[ "$status" == 2 ]] || fail "luaprov $*: expected exit 2, got $status ($(cat "$WORK/err"))"
  local cmd="${1:-}"
  [[ "$cmd" == -* || "$cmd" == bogus ]] && cmd=""
  local hint="run 'luaprov${cmd:+ $cmd} --help' for usage"
  [[ "$(cat "$WORK/err")" == "$want"$'\n'"$hint" ]] ||
    fail "luaprov $*: expected '$want' and the hint, got: $(cat "$WORK/err")"
  [[ ! -s "$WORK/out" ]] || fail "luaprov $*: printed on stdout: $(cat "$WORK/out")"
}

for cmd in check run sim eval demo version instance; do
  args=("$cmd")
  [[ "$cmd" == eval ]] && args+=(drift)
  usage_error "luaprov $cmd: unknown option '--bogus'" "${args[@]}" --bogus
done
usage_error "luaprov run: unknown option '--bogus'" run --bogus value
usage_error "luaprov check: option '--scripts' needs a value" check --scripts
usage_error "luaprov eval: option '--nodeclaim' needs a value" eval drift --nodeclaim --nodeclass x
usage_error "luaprov sim: option '--addr' needs a value" sim --addr
usage_error "luaprov eval: unknown subcommand 'bogus' (one of drift, repair, tags, disruption, instance-types, user-data)" \
  eval bogus
usage_error "luaprov: unknown command 'bogus' (one of run, sim, eval, demo, check, version, instance)" bogus
usage_error "luaprov version: unexpected argument 'x'" version x
usage_error "luaprov eval: unknown option '--unknown'" eval drift --unknown value
usage_error "luaprov instance: give one of NAME, --nodeclaim FILE and --provider-id ID" instance

# --help: the full help on stdout, exit 0
for cmd in check run sim eval demo version instance; do
  "$LUAPROV" "$cmd" --help >"$WORK/out" 2>"$WORK/err" || fail "luaprov $cmd --help exited $?"
  grep -q "^usage: luaprov $cmd" "$WORK/out" || fail "luaprov $cmd --help: no usage: $(cat "$WORK/out")"
done

# check --scripts DIR is the positional DIR
"$LUAPROV" check --scripts "$LUAPROV_SOURCE_DIR/examples/policies/drift-image-age" >"$WORK/out" ||
  fail "check --scripts: $(cat "$WORK/out")"
grep -q "drift-image-age: ok" "$WORK/out" || fail "check --scripts checked something else: $(cat "$WORK/out")"

# eval --now: the image-age example drifts an image (built 2024-12-18) 30 days after its build
cp "$F/nodeclaim.yaml" "$WORK/claim.yaml"
sed -i 's|    karpenter.sh/nodepool: default|&\n    example.com/team: ml|' "$WORK/claim.yaml"
drift_at() {
  "$LUAPROV" eval drift --scripts "$LUAPROV_SOURCE_DIR/examples/policies/drift-image-age" --nodeclaim "$WORK/claim.yaml" \
    --nodeclass "$F/nodeclass.json" --instance "$F/instance.json" --now "$1"
}
got="$(drift_at 2025-01-10T00:00:00Z)" || fail "eval --now before the boundary: $got"
[[ "$got" == '{"reason":""}' ]] || fail "eval --now 2025-01-10: expected no drift, got $got"
got="$(drift_at 2025-01-18T00:00:01Z)" || fail "eval --now after the boundary: $got"
[[ "$got" == '{"reason":"ImageAgeDrift"}' ]] || fail "eval --now 2025-01-18: expected ImageAgeDrift, got $got"
status=0
got="$(drift_at 2025-13-01)" || status=$?
[[ "$status" == 1 ]] || fail "eval --now 2025-13-01: expected exit 1, got $status"
[[ "$got" == '{"error":"--now 2025-13-01: give epoch seconds (1796205600) or RFC 3339 (2026-12-02T10:00:00Z)"}' ]] ||
  fail "eval --now 2025-13-01: $got"
echo "ok"
