#!/usr/bin/env bash
# Installs the Debian packages Anvil needs. Idempotent: does nothing when all are present.
#   install-deps.sh build   packages to build Anvil (the Dockerfile's builder uses this)
#   install-deps.sh test    plus the tests' peers: Prometheus (promtool and a real server),
#                           docker-compose (validates the compose files), Python gRPC,
#                           Chromium (loads the status page headless), PostgreSQL 15
#   install-deps.sh bench   plus the benchmark peers (libtorch is large: kept out of `build`;
#                           libb64 for perf_analyzer, bench/kserve_perf_analyzer.sh)
#   install-deps.sh fuzz    plus clang 14 and its libFuzzer/sanitizer runtimes (make fuzz)
#   install-deps.sh lint    clang-format 14 only (make format, make format-check)
#   install-deps.sh image   debootstrap and buildah (and ip) only: the image check without a Docker
#                           engine (make test-image: a Debian 12 base made with debootstrap,
#                           the Dockerfile built by buildah in chroot isolation, vfs storage)
set -euo pipefail
# libblis4 and libdnnl2: float32 GEMM candidates beside OpenBLAS, loaded at run time
# (core/backend/cpu/gemm.h); libdnnl2 also gives the bf16 and int8 primitives
# (core/backend/cpu/onednn_primitives.h: its C API is declared there, so no libdnnl-dev);
# the tests run every candidate.
build_pkgs=(cmake ninja-build g++ ccache pkg-config libopenblas-dev libblis4 libdnnl2 libgtest-dev libgmock-dev
            nlohmann-json3-dev zlib1g-dev libstb-dev python3-venv
            libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libsqlite3-dev libcli11-dev
            prometheus-cpp-dev libabsl-dev libonnx-dev libopencv-dnn-dev libgloo-dev libhiredis-dev libpq-dev
            libcurl4-openssl-dev libssl-dev)
# libgloo-dev: data-parallel training's collectives (core/distributed); its Redis store's header
# needs libhiredis-dev. libpq-dev: the PostgreSQL job store (server/store_postgres.h).
# libcurl4-openssl-dev: the S3-compatible artifact store (server/artifacts/s3_artifacts.h);
# libssl-dev: its SHA-256 (server/artifacts/digest.h).
# postgresql-15: the server binaries the tests start themselves in temporary folders
# (tests/fixtures/postgres_server.h; the package's own cluster is never used); iproute2 (network
# namespaces): for the replica and multi-process tests;
# redis-server: the rendezvous store of multi-host data-parallel runs (anvil-run starts one).
test_pkgs=(python3-grpcio python3-protobuf prometheus docker-compose chromium openssl postgresql-15 iproute2
           redis-server)
bench_pkgs=(libtorch-dev python3-torch python3-torchvision python3-pil libb64-0d)
fuzz_pkgs=(clang-14 libclang-rt-14-dev)
lint_pkgs=(clang-format-14)
image_pkgs=(debootstrap debian-archive-keyring buildah iproute2)

want=("${build_pkgs[@]}")
[[ "${1:-build}" == "lint" ]] && want=("${lint_pkgs[@]}")
[[ "${1:-build}" == "image" ]] && want=("${image_pkgs[@]}")
[[ "${1:-build}" == "test" || "${1:-build}" == "bench" ]] && want+=("${test_pkgs[@]}")
[[ "${1:-build}" == "bench" ]] && want+=("${bench_pkgs[@]}")
[[ "${1:-build}" == "fuzz" ]] && want+=("${fuzz_pkgs[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
echo "installing: ${missing[*]}"
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
