# Anvil's two commands: `make demo` and `make test`. Each installs what it needs first.
SHELL := /bin/bash
BUILD_DIR ?= build
SAN_DIR   ?= build-sanitize
TSAN_DIR  ?= build-tsan
IMAGE_DIR ?= build-image
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= $(JOBS)
DATA_DIR  ?= data
JOBS      ?= $(shell nproc)
# One compiler cache for every tree of this project on the machine (a clean clone compiles from
# the cache its developer's trees left): paths under the tree are hashed relative to it, and the
# build folder's own path is not hashed (hash_dir false; the cost: an object's DW_AT_comp_dir
# may name the tree that first compiled it). docs/ci.md.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_DIR ?= $(HOME)/.cache/ccache
export CCACHE_NOHASHDIR := 1

.PHONY: all deps deps-test deps-fuzz deps-lint deps-bench deps-image data peers bench-peers build test test-asan test-tsan fuzz \
  soak test-image demo bench format format-check clean

all: build

deps:
	@scripts/install-deps.sh build

deps-test: deps
	@scripts/install-deps.sh test

deps-fuzz: deps
	@scripts/install-deps.sh fuzz

deps-lint:
	@scripts/install-deps.sh lint

deps-bench: deps
	@scripts/install-deps.sh bench

deps-image:
	@scripts/install-deps.sh image

# Python peers for interoperability tests (safetensors, numpy) in .venv; best effort.
peers:
	@scripts/install-test-peers.sh .venv

# The built-in digits dataset (UCI optical digits, from Debian's python3-sklearn package).
data:
	@scripts/fetch-data.sh $(DATA_DIR)

# Without a visible GPU the CUDA backend (built whenever nvcc exists) is compiled to PTX only:
# every kernel still goes through the compiler, in a fraction of the time of SASS for each
# architecture. On a GPU machine the default architectures apply (cmake/AnvilCuda.cmake).
CUDA_ARCHS ?= $(shell nvidia-smi -L > /dev/null 2>&1 || echo 90-virtual)

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  $(if $(CUDA_ARCHS),-DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS))

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Every test but the soak (label soak: `make soak`, which CI runs on its own after this: it
# measures the server's memory, so it runs with nothing beside it).
test: deps-test build data peers
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600 -LE soak

# 256 concurrent Predicts while a job trains, 20 s of warm-up then 60 s measured; anvild's
# memory and threads must stay within 10 %.
soak: deps-test build data
	cd $(BUILD_DIR) && ctest --output-on-failure -L soak

# One clang 14 build serves the sanitized tests and the fuzz targets: AddressSanitizer + UBSan at
# -O1 (the usual level: -O0 made the tests several times slower) with libFuzzer's coverage in
# every library (-fsanitize=fuzzer-no-link, from ANVIL_BUILD_FUZZERS); the fuzz targets add the
# fuzzer's main. No CUDA backend: the CUDA runtime is not instrumented. clang's thread-safety
# analysis checks every annotated lock here (cmake/AnvilWarnings.cmake).
$(SAN_DIR)/build.ninja:
	cmake -S . -B $(SAN_DIR) -G Ninja -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
	  -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
	  -DANVIL_SANITIZE=address,undefined -DANVIL_CUDA=OFF -DANVIL_BUILD_EXAMPLES=OFF -DANVIL_BUILD_FUZZERS=ON \
	  -DANVIL_WERROR=OFF

# The engine, data, nn and service tests again under AddressSanitizer + UBSan (CI runs this
# too). The "system" tests (the real binaries, Prometheus, compose files) run in `make test`.
# The connection-flood test runs in `make test` and under ThreadSanitizer only: once the flood
# fills the fd table, UBSan's vptr check (whose runtime needs fds of its own) reports every
# dynamic type it meets as invalid.
# tests/lsan.supp names the uninstrumented libraries whose leaks are not Anvil's (hiredis's
# replies that Gloo's RedisStore leaves behind).
# intercept_tls_get_addr=0: a sanitizer runtime's __tls_get_addr interceptor can read a dynamic
# TLS block of the dlopen'd oneDNN, BLIS and OpenMP that starts 16 bytes past a page as a glibc
# 2.19 header, take garbage for its bounds, and LeakSanitizer's tracer dies at exit.
test-asan: deps-test deps-fuzz data $(SAN_DIR)/build.ninja
	cmake --build $(SAN_DIR) -j $(JOBS) --target anvil_core_tests anvil_data_tests anvil_nn_tests anvil_conformance_tests \
	  anvil_onnx_tests anvil_server_tests anvil_fault_tests anvil_distributed_tests ddp_train_main anvil-run anvild anvil \
	  anvil_python_stubs
	cd $(SAN_DIR) && ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  ctest --output-on-failure -j $(JOBS) -L 'core|data|nn|onnx|server|fault|distributed' -E anvil_connection_flood_test --timeout 900

# ThreadSanitizer over the data pipeline (the DataLoader is where threads meet) and the service
# (scheduler, workers, batcher, the Predict pool, the listener watchdog). gRPC and Abseil are not
# instrumented: tests/tsan.supp names them, nothing of Anvil's.
test-tsan: deps-test data
	cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DANVIL_SANITIZE=thread -DANVIL_CUDA=OFF \
	  -DANVIL_BUILD_EXAMPLES=OFF
	cmake --build $(TSAN_DIR) -j $(JOBS) --target anvil_data_tests anvil_server_tests anvil_fault_tests anvild anvil \
	  anvil_python_stubs
	cd $(TSAN_DIR) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp \
	  ctest --output-on-failure -j $(JOBS) -L 'data|server|fault' --timeout 900

# libFuzzer (the sanitizer build above) over every parser of untrusted input: the wire tensors,
# job and model specs, safetensors, model archives, CSV, IDX and ONNX; FUZZ_SECONDS each (CI:
# 60), FUZZ_JOBS at a time (one core each), from the seed corpora in fuzz/corpus. A finding fails
# the target (reproducer in $(SAN_DIR)/findings/).
fuzz: deps-fuzz $(SAN_DIR)/build.ninja
	cmake --build $(SAN_DIR) -j $(JOBS) --target fuzz_wire_tensor fuzz_kserve_request fuzz_listing fuzz_job_spec \
	  fuzz_model_spec fuzz_safetensors fuzz_model_archive fuzz_csv fuzz_idx fuzz_onnx_import
	scripts/run-fuzzers.sh $(SAN_DIR) $(FUZZ_SECONDS) $(FUZZ_JOBS)

# The container image as a user would use it, without a Docker engine (scripts/test-image.sh; CI
# runs it): a Debian 12 base made with debootstrap (cached in $(IMAGE_DIR)/base), the Dockerfile
# built by buildah (chroot isolation, vfs storage in $(IMAGE_DIR)), its HEALTHCHECK and size
# checked, then its entrypoint run as its user in a chroot of its root: health, a job, a Predict,
# the HEALTHCHECK command, a SIGTERM drain.
test-image: deps-image
	scripts/test-image.sh $(IMAGE_DIR)

# anvild on ./anvil-data, the digits CNN trained through the service, predictions, an export.
demo: build data
	scripts/demo.sh $(BUILD_DIR) $(DATA_DIR)

# PyTorch 2.x (with its MKL and oneDNN) in .venv-bench: the modern peer beside libtorch 1.13.
bench-peers:
	@scripts/install-bench-peers.sh .venv-bench

bench: deps-bench bench-peers
	cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_BUILD_BENCH=ON \
	  -DANVIL_BUILD_TESTS=OFF
	cmake --build build-bench -j $(JOBS)
	bench/run.sh build-bench

# Every tracked C++ file (scripts/check-format.sh); CI runs format-check first.
format: deps-lint
	scripts/check-format.sh --fix

format-check: deps-lint
	scripts/check-format.sh

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR) $(TSAN_DIR) build-bench $(IMAGE_DIR)
