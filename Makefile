# Thin wrapper over CMake for the README's two commands. Every target installs what is missing
# (tools/install-deps.sh) before it configures and builds.
BUILD      ?= build
ASAN_BUILD ?= build-asan
BENCH_BUILD ?= build-bench
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(basename $(notdir $(wildcard spec/fuzz/fuzz_*.c)))
JOBS       ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all build run test test-asan bench bench-scale fuzz clean

all: build

build:
	@tools/install-deps.sh build
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DLUAPROV_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The engine's main job: `luaprov demo`, the scripted story against the built-in simulators
# (provisioning, drift, repair, a hot reload, Bizfly scaling over gRPC); exits 0 when every step
# checked out. Also builds luaprov.so (target luaprov_module), which the busted test kit loads.
run:
	@tools/install-deps.sh build
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DLUAPROV_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target luaprov luaprov_module
	@$(BUILD)/luaprov demo

# Every test under ctest: C unit tests, busted specs, integration tests, luacheck and clang-format, and
# the end-to-end tests against a real control plane (tools/install-e2e.sh builds it from the Go module
# proxy: about 10 minutes the first time, nothing after); the C and integration tests also run under
# AddressSanitizer + UndefinedBehaviorSanitizer; and the fuzz slice (label fuzz: spec/fuzz built with clang,
# each target run 25 s).
# The sanitizer pass runs first so that the last summary line is the full suite's.
test:
	@tools/install-deps.sh test
	@$(MAKE) --no-print-directory test-asan
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DLUAPROV_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@npm ci --prefix spec/grpc --no-audit --no-fund >/dev/null
	@tools/install-e2e.sh
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan:
	@tools/install-deps.sh test
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DLUAPROV_WERROR=ON -DLUAPROV_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@npm ci --prefix spec/grpc --no-audit --no-fund >/dev/null
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j $(JOBS) -L '^(c|integration)$$'

bench:
	@tools/install-deps.sh bench
	@cmake -S . -B $(BENCH_BUILD) -DCMAKE_BUILD_TYPE=Release -DLUAPROV_WERROR=ON >/dev/null
	@cmake --build $(BENCH_BUILD) -j $(JOBS)
	@npm ci --prefix spec/grpc --no-audit --no-fund >/dev/null
	@spec/bench/run.sh $(BENCH_BUILD)

# Karpenter's performance scenarios against the e2e suite's real control plane, each run by luaprov
# (Release, against `luaprov sim`) and by Karpenter's kwok provider, with the ratios (spec/bench-scale/).
# SCENARIOS="basic drift" picks some, CONTROLLERS=luaprov one controller. Prints figures; never fails on time.
bench-scale:
	@tools/install-deps.sh bench
	@cmake -S . -B $(BENCH_BUILD) -DCMAKE_BUILD_TYPE=Release -DLUAPROV_WERROR=ON >/dev/null
	@cmake --build $(BENCH_BUILD) -j $(JOBS) --target luaprov
	@tools/install-e2e.sh
	@tools/install-bench-scale.sh
	@spec/bench-scale/run.sh $(BENCH_BUILD)/luaprov

# The libFuzzer targets of spec/fuzz, built with clang in $(FUZZ_BUILD), each run FUZZ_SECONDS over its
# seeds (FUZZ_TARGETS=fuzz_json picks some). A crash leaves a minimised reproducer under
# $(FUZZ_BUILD)/fuzz-runs/<target>/artifacts and the run fails (spec/fuzz/README.md).
fuzz:
	@tools/install-deps.sh fuzz
	@spec/fuzz/build.sh $(FUZZ_BUILD) $(JOBS)
	@failed=; for t in $(FUZZ_TARGETS); do echo "== $$t ($(FUZZ_SECONDS) s)"; \
		spec/fuzz/run.sh $(FUZZ_BUILD) $$t $(FUZZ_SECONDS) || failed="$$failed $$t"; done; \
		if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed" >&2; exit 1; fi

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(BENCH_BUILD) $(FUZZ_BUILD)
