#!/usr/bin/env bash
# Installs the Debian 12 packages luaprov needs, only those missing.
# usage: tools/install-deps.sh [build|test|bench|fuzz]
#   build  compile and run the engine
#   test   also the test tools (busted, luacheck, lyaml, clang-format, jq; node and npm for grpc-js;
#          openssl and ss for the end-to-end tests' control plane; clang and its libFuzzer runtime for
#          the suite's fuzz slice, spec/fuzz/README.md)
#   fuzz   the build packages and clang with libFuzzer (`make fuzz`)
#   bench  also the load generator used as the reference (wrk)
# As root it runs apt-get; otherwise it prints the exact command to run and fails.
set -euo pipefail

profile="${1:-build}"
packages=(cmake make gcc pkg-config curl ca-certificates
  liblua5.4-dev lua5.4 lua-cjson libuv1-dev libcurl4-openssl-dev libssl-dev
  libhttp-parser-dev libjansson-dev libyaml-dev libnghttp2-dev
  libprotobuf-c-dev protobuf-c-compiler)
case "$profile" in
  build) ;;
  test) packages+=(lua-busted lua-check lua-yaml clang-format jq nodejs npm openssl iproute2 clang libclang-rt-14-dev) ;;
  bench) packages+=(lua-busted lua-check lua-yaml clang-format jq nodejs npm openssl iproute2 wrk) ;;
  fuzz) packages+=(clang libclang-rt-14-dev) ;;
  *) echo "install-deps: unknown profile '$profile' (build, test, bench or fuzz)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  # NodeSource's nodejs bundles npm and conflicts with Debian's npm package: a working npm will do.
  [[ "$p" == npm ]] && command -v npm >/dev/null && continue
  status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

command="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ "$(id -u)" -ne 0 ]]; then
  echo "luaprov needs these Debian packages: ${missing[*]}" >&2
  echo "run as root:  apt-get update && $command" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
$command >/dev/null
