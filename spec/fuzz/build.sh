#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in their own build tree (README.md).
# usage: spec/fuzz/build.sh BUILD_DIR [JOBS]
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:?usage: build.sh BUILD_DIR [JOBS]}"
jobs="${2:-$(nproc)}"
if ! command -v clang >/dev/null; then
  echo "fuzz: clang is missing; install it with: tools/install-deps.sh fuzz" >&2
  exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$src" -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLUAPROV_FUZZ=ON \
  -DBUILD_TESTING=OFF -DLUAPROV_WERROR=ON "${launcher[@]}" >/dev/null
cmake --build "$dir" -j "$jobs" --target fuzz_targets
