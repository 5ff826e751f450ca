#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, build the CUDA backend for it, run the GPU
# tests and benchmarks, and print one short table. Meant to finish in under 8 minutes on a
# 16-core machine, build included.
#
#   tests/gpu/fetch-deps.sh        # first, on a machine with Debian's package lists
#   tests/gpu/check.sh [OUT_DIR]   # then on the GPU machine (logs and the table go to OUT_DIR)
#
# Steps: configure (CUDA on, sm_90 unless CUDA_ARCHS says otherwise; the service only when
# gRPC is installed), build the test and benchmark programs, then
#   1. CPU-vs-CUDA parity of every op, forward and backward (fp32, TF32 off, <= 1e-5);
#   2. the digits CNN trained on cuda:0 against the same run on the CPU; fused optimizer steps
#      against the CPU's; pinned batches and staged host-to-device copies; the static int8
#      Linear through cuBLASLt against the CPU's bits;
#   3. benchmarks: sgemm and bf16 GEMM against cuBLAS, element-wise GB/s against a copy, the
#      int8 Linear against float32,
#      training steps against PyTorch on the same GPU, device mallocs in steady state;
#   4. the NVML families of a metrics scrape.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:-${OUT:-/tmp/anvil-gpu-check}}"
mkdir -p "$out"
build="${BUILD_DIR:-build-gpu}"
jobs="$(nproc)"
declare -A result

note() { printf '\n== %s\n' "$*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt" \
  || { echo "no NVIDIA GPU visible"; exit 2; }

# Dependencies the image may lack: unpack the Debian packages fetch-deps.sh downloaded.
prefix_args=()
if [[ -d .gpu-debs ]] && ls .gpu-debs/*.deb > /dev/null 2>&1; then
  deps=/tmp/anvil-deps
  mkdir -p "$deps"
  for f in .gpu-debs/*.deb; do dpkg-deb -x "$f" "$deps"; done
  # Debian's libopenblas-dev points at the pthread variant through alternatives; use it directly.
  arch_lib="$deps/usr/lib/x86_64-linux-gnu"
  if [[ -f "$arch_lib/openblas-pthread/libopenblas.so.0" ]]; then
    ln -sf "$arch_lib/openblas-pthread/libopenblas.so.0" "$arch_lib/libopenblas.so"
  fi
  export LD_LIBRARY_PATH="$arch_lib:$arch_lib/openblas-pthread:$deps/usr/lib:${LD_LIBRARY_PATH:-}"
  prefix_args=(-DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_INCLUDE_PATH="$deps/usr/include"
               -DCMAKE_LIBRARY_PATH="$arch_lib;$arch_lib/openblas-pthread"
               -DGTEST_ROOT="$deps/usr")
fi
service=OFF
pkg-config --exists grpc++ 2> /dev/null && service=ON

note "configure (service $service)"
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" -DANVIL_BUILD_SERVICE=$service -DANVIL_BUILD_EXAMPLES=OFF \
  "${prefix_args[@]}" > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
note "build ($jobs jobs)"
cmake --build "$build" -j "$jobs" --target anvil_core_tests anvil_nn_tests anvil_data_tests anvil_distributed_tests anvil_cuda_bench anvil_nvml_probe \
  > "$out/build.log" 2>&1 || { grep -E "error|FAILED" -A3 "$out/build.log" | head -60; exit 1; }
result[build]="$(( $(date +%s) - start )) s"

note "1. parity"
"$build/tests/core/anvil_core_tests" --gtest_filter='Cuda*' --gtest_brief=1 2>&1 | tee "$out/parity.log"
result[parity]=$([[ ${PIPESTATUS[0]} -eq 0 ]] && echo pass || echo FAIL)

note "2. digits CNN on cuda:0"
ANVIL_DATA_DIR="${ANVIL_DATA_DIR:-data}" "$build/tests/nn/anvil_nn_tests" --gtest_filter='CudaTraining*' 2>&1 \
  | tee "$out/training.log"
result[training]=$([[ ${PIPESTATUS[0]} -eq 0 ]] && echo pass || echo FAIL)
result[accuracy]=$(sed -n 's/.*test accuracy \(.*\)/\1/p' "$out/training.log" | head -1)
"$build/tests/data/anvil_data_tests" --gtest_filter='DataLoaderTest.PinMemory*:DataLoaderTest.Staged*' 2>&1 \
  | tee "$out/pinned.log"
result[pinned]=$([[ ${PIPESTATUS[0]} -eq 0 ]] && echo pass || echo FAIL)

note "2a. int8 on cuda:0: the static Linear through cuBLASLt, bit for bit against the CPU"
"$build/tests/nn/anvil_nn_tests" --gtest_filter='CudaInt8*' 2>&1 | tee "$out/int8.log"
result[int8]=$([[ ${PIPESTATUS[0]} -eq 0 ]] && echo pass || echo FAIL)

note "2b. NCCL: a one-rank group and DDP on cuda:0"
"$build/tests/distributed/anvil_distributed_tests" --gtest_filter='Nccl*' 2>&1 | tee "$out/nccl.log"
result[nccl]=$([[ ${PIPESTATUS[0]} -eq 0 ]] && (grep -q SKIPPED "$out/nccl.log" && echo SKIPPED || echo pass) || echo FAIL)

note "3. benchmarks"
"$build/bench/gpu/anvil_cuda_bench" 2>&1 | tee "$out/bench.txt"
python3 bench/gpu/torch_step.py 2>&1 | tee -a "$out/bench.txt" || echo "(PyTorch peer not available)"

note "4. NVML"
"$build/tests/gpu/anvil_nvml_probe" 2>&1 | tee "$out/nvml.txt"
result[nvml]=$([[ ${PIPESTATUS[0]} -eq 0 ]] && echo present || echo ABSENT)

note "summary"
{
  printf '%-12s %s\n' gpu "$(cat "$out/gpu.txt")"
  for k in build parity training accuracy pinned int8 nccl nvml; do printf '%-12s %s\n' "$k" "${result[$k]:-n/a}"; done
  echo
  cat "$out/bench.txt"
} | tee "$out/summary.txt"
