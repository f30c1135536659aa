# Entry points for people and CI. CMake, Ninja and ctest do the work; this file only
# sequences them and installs what they need (scripts/install-deps.sh, fast when done).
#
#   make            build into build/
#   make demo       kernel TCP vs ulsock, side by side (sockperf, redis)
#   make test       every ctest suite, then the sanitizer and fuzz smoke runs
#   make bench      the full benchmark (tools/bench.py); BENCH_ARGS="--quick" for a short one
#   make ubench     the micro-benchmark suite (tools/ubench.py): report in UBENCH_DIR
#   make soak       reliability at scale (tools/soak.py, not in CI): 10 GiB over 64
#                   connections, 100,000 connection cycles; SOAK_ARGS="--short" for a short one.
#                   Then fuzz-long, unless SOAK_FUZZ=0 (the default with --short)
#   make asan       ASan+UBSan build in build-asan, unit tests
#   make tsan       TSan build in build-tsan (clang when installed), tests labelled tsan
#   make fuzz       libFuzzer build in build-fuzz (clang), each target for FUZZ_SECONDS
#   make fuzz-long  every fuzz target for FUZZ_LONG_RUNS executions (tools/fuzz_long.py,
#                   not in CI): report in build-fuzz/fuzz-long.json
#   make clean      remove every build directory
#
# Python (the test suites, tools/*.py) is always the project's own environment, .venv/,
# made by scripts/install-deps.sh from requirements.txt: never whatever python3 or pytest
# this machine has.

SHELL := /bin/bash

BUILD       ?= build
BUILD_ASAN  ?= build-asan
BUILD_TSAN  ?= build-tsan
BUILD_FUZZ  ?= build-fuzz
BUILD_TYPE  ?= RelWithDebInfo
CMAKE_ARGS  ?=
VENV        := $(CURDIR)/.venv
PYTHON      := $(VENV)/bin/python
CTEST_JOBS  ?= 2
CTEST_FLAGS ?= --output-on-failure --timeout 900
FUZZ_SECONDS ?= 20
FUZZ_CC     ?= clang
# GCC refuses atomic_thread_fence under -fsanitize=thread (-Werror=tsan); clang does not.
TSAN_CC     ?= $(shell command -v clang 2>/dev/null)
BENCH_ARGS  ?=
UBENCH_ARGS ?=
UBENCH_DIR  ?= docs/perf/ubench
SOAK_ARGS   ?=
# `make soak` runs fuzz-long too, except for a short soak (SOAK_ARGS="--short").
SOAK_FUZZ   ?= $(if $(findstring --short,$(SOAK_ARGS)),0,1)
FUZZ_LONG_RUNS ?= 10000000
FUZZ_LONG_ARGS ?=
DEMO_ARGS   ?=

.PHONY: all build deps demo test test-sanitizers bench ubench soak asan tsan fuzz fuzz-build \
	fuzz-long clean

# Anything a recipe starts by the name python3 or pytest finds the environment's first.
export PATH := $(VENV)/bin:$(PATH)

all: build

deps:
	@bash scripts/install-deps.sh

# configure DIR EXTRA-CMAKE-ARGS: configures DIR unless it is configured already, with the
# project's Python, and the set of pytest files is unchanged (tests/CMakeLists.txt globs
# them at configure time, so a new test_*.py needs a new configure to become a ctest
# test). A build directory configured with another interpreter (by hand, or before .venv/
# existed) is configured again, so ctest never runs the suites with it.
define configure
	@list=$$(ls tests/*/test_*.py ulflow/tests/test_*.py 2>/dev/null | sort); \
	python=$$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' $(1)/CMakeCache.txt 2>/dev/null); \
	if [ ! -f $(1)/build.ninja ] || [ "$$list" != "$$(cat $(1)/.pytest-files 2>/dev/null)" ] || \
		[ "$$python" != "$(PYTHON)" ]; then \
		echo "configuring $(1)"; \
		cmake -S . -B $(1) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
			-DPython3_EXECUTABLE=$(PYTHON) $(2) $(CMAKE_ARGS) && \
		printf '%s\n' "$$list" > $(1)/.pytest-files; \
	fi
endef

build: deps
	$(call configure,$(BUILD),)
	ninja -C $(BUILD)

demo: build
	$(PYTHON) tools/demo.py --build $(BUILD) $(DEMO_ARGS)

# The main suites first; the sanitizer and fuzz smoke runs happen even when they fail,
# so one run reports everything, and the exit status covers both.
test: build
	@rc=0; \
	(cd $(BUILD) && ctest $(CTEST_FLAGS) -j$(CTEST_JOBS)) || rc=1; \
	$(MAKE) --no-print-directory test-sanitizers || rc=1; \
	if [ $$rc -ne 0 ]; then echo "make test: FAILED"; else echo "make test: passed"; fi; \
	exit $$rc

# Cheap sanitizer coverage for `make test` (a few minutes on 2 CPUs): the unit tests
# under ASan+UBSan, the tsan-labelled tests under TSan, and a few seconds of each fuzz
# target. Each part is skipped, not failed, when the toolchain cannot do it.
test-sanitizers:
	@rc=0; \
	if echo 'int main(void){return 0;}' | $${CC:-cc} -fsanitize=address,undefined -x c - \
		-o /dev/null 2>/dev/null; then \
		$(MAKE) --no-print-directory asan || rc=1; \
	else \
		echo "test-sanitizers: compiler lacks -fsanitize=address,undefined: skipping asan"; \
	fi; \
	if [ -n "$(TSAN_CC)" ]; then \
		$(MAKE) --no-print-directory tsan || rc=1; \
	else \
		echo "test-sanitizers: clang not found: skipping tsan"; \
	fi; \
	if command -v $(FUZZ_CC) >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$${FUZZ_SMOKE_SECONDS:-10} || rc=1; \
	else \
		echo "test-sanitizers: $(FUZZ_CC) not found: skipping fuzz"; \
	fi; \
	exit $$rc

bench: build
	$(PYTHON) tools/bench.py --build $(BUILD) $(BENCH_ARGS)

# Every ulsock-bench test on kernel TCP, each ulsock profile and Unix domain sockets,
# with fi_pingpong, sockperf, iperf3 and qperf beside them; writes the report.
ubench: build
	$(PYTHON) tools/ubench.py --build $(BUILD) --report $(UBENCH_DIR) $(UBENCH_ARGS)

# Data integrity and leaks at scale, both ends under ulsock (docs/RELIABILITY.md); CI runs
# the short version as the ctest test integration.test_soak. The long fuzz runs follow
# (SOAK_FUZZ=0 skips them, as a machine without clang does), whatever the soak found;
# the exit status covers both.
soak: build
	@rc=0; \
	$(PYTHON) tools/soak.py --build $(BUILD) $(SOAK_ARGS) || rc=1; \
	if [ "$(SOAK_FUZZ)" = 0 ]; then \
		echo "soak: fuzz-long skipped (SOAK_FUZZ=0)"; \
	elif ! command -v $(FUZZ_CC) >/dev/null 2>&1; then \
		echo "soak: $(FUZZ_CC) not found: skipping fuzz-long"; \
	else \
		$(MAKE) --no-print-directory fuzz-long || rc=1; \
	fi; \
	exit $$rc

asan: deps
	$(call configure,$(BUILD_ASAN),-DULS_SANITIZE=address$(,)undefined)
	ninja -C $(BUILD_ASAN)
	cd $(BUILD_ASAN) && ctest $(CTEST_FLAGS) -j$(CTEST_JOBS) -L unit

tsan: deps
	$(call configure,$(BUILD_TSAN),-DULS_SANITIZE=thread \
		$(if $(TSAN_CC),-DCMAKE_C_COMPILER=$(TSAN_CC)))
	ninja -C $(BUILD_TSAN)
	cd $(BUILD_TSAN) && ctest $(CTEST_FLAGS) -j$(CTEST_JOBS) -L tsan

# Fuzz targets are whatever tests/fuzz builds. When it registers ctest tests labelled
# fuzz, those run (each for FUZZ_SECONDS, through its ULS_FUZZ_SECONDS cache option);
# otherwise scripts/run-fuzz.sh runs every fuzz_* executable in the build tree.
# tests/fuzz instruments its targets itself, so the rest of this build is plain.
fuzz-build: deps
	@if ! command -v $(FUZZ_CC) >/dev/null 2>&1; then \
		echo "fuzz: $(FUZZ_CC) not found: run scripts/install-deps.sh"; exit 1; fi
	$(call configure,$(BUILD_FUZZ),-DCMAKE_C_COMPILER=$(FUZZ_CC) -DULS_FUZZ=ON)
	@cmake -S . -B $(BUILD_FUZZ) -DULS_FUZZ_SECONDS=$(FUZZ_SECONDS) >/dev/null
	ninja -C $(BUILD_FUZZ)

fuzz: fuzz-build
	@if (cd $(BUILD_FUZZ) && ctest -N -L fuzz | grep -q 'Total Tests: [1-9]'); then \
		cd $(BUILD_FUZZ) && ctest $(CTEST_FLAGS) -L fuzz; \
	else \
		bash scripts/run-fuzz.sh $(BUILD_FUZZ) $(FUZZ_SECONDS); \
	fi

# Each fuzz target for FUZZ_LONG_RUNS executions (hours for all of them), from its seeds
# and the corpus earlier runs left in the build tree (tools/fuzz_long.py).
fuzz-long: fuzz-build
	$(PYTHON) tools/fuzz_long.py --build $(BUILD_FUZZ) -runs=$(FUZZ_LONG_RUNS) \
		--json $(BUILD_FUZZ)/fuzz-long.json $(FUZZ_LONG_ARGS)

clean:
	rm -rf -- $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_FUZZ)

# A literal comma for use inside $(call ...) arguments.
, := ,
