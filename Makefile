# Anvil's two commands: `make demo` and `make test`. Each installs what it needs first.
SHELL := /bin/bash
BUILD_DIR ?= build
ASAN_DIR  ?= build-asan
JOBS      ?= $(shell nproc)
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_DIR ?= $(HOME)/.cache/ccache

.PHONY: all deps deps-bench build test test-asan demo bench format clean

all: build

deps:
	@scripts/install-deps.sh build

deps-bench: deps
	@scripts/install-deps.sh bench

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

# The core tests again under AddressSanitizer + UBSan (CI runs this too).
test-asan: deps
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DANVIL_SANITIZE=address,undefined \
	  -DANVIL_BUILD_EXAMPLES=OFF
	cmake --build $(ASAN_DIR) -j $(JOBS) --target anvil_core_tests
	cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -L core --timeout 900

demo: build
	$(BUILD_DIR)/examples/fit_regression

bench: deps-bench
	cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_BUILD_BENCH=ON \
	  -DANVIL_BUILD_TESTS=OFF
	cmake --build build-bench -j $(JOBS)
	bench/run.sh build-bench

format:
	find core tests bench examples -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) build-bench
