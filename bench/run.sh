#!/usr/bin/env bash
# Runs every benchmark program of a build and prints their tables.
#   bench/run.sh [BUILD_DIR]       (default: build-bench; `make bench` builds and runs it)
# Extra arguments after BUILD_DIR go to each program (e.g. a thread count and a filter).
# The output is also kept in BUILD_DIR/bench/results-<date>.md.
set -euo pipefail

build_dir="${1:-build-bench}"
shift || true
bench_dir="${build_dir}/bench"
if [[ ! -d "${bench_dir}" ]]; then
  echo "no ${bench_dir}: configure with -DANVIL_BUILD_BENCH=ON and build first (make bench)" >&2
  exit 1
fi

# One environment for both peers, set here so no program can favour one side:
# - OPENBLAS_CORETYPE is unset: the machines' environment pins OpenBLAS to its Haswell
#   (AVX2) kernels, about half the AVX-512 speed on these CPUs (docs/design.md, "Machine facts"). Both
#   peers call the same libopenblas, so both get the CPU's best kernels alike.
# - OPENBLAS_NUM_THREADS=1: OpenBLAS's own pool next to another pool (libtorch's OpenMP,
#   Anvil's) oversubscribes the 2 cores, which makes runs several times slower and 10x
#   noisier. Where a row needs BLAS threads (libtorch's sgemm) the program grants them
#   explicitly, with the same count as the other side's threads.
# - GLIBC_TUNABLES=glibc.malloc.hugetlb=1: lets glibc malloc (libtorch's CPU allocator)
#   back large blocks with transparent huge pages; fresh 4 KiB pages cost ~11 us each to
#   fault in here. The reference libtorch figures in docs/design.md were measured with it,
#   and without it libtorch's out-of-place rows would measure page faults, not the peer.
run_env=(env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.hugetlb=1)

run_all() {
  local rc=0 prog
  shopt -s nullglob
  for prog in "${bench_dir}"/anvil_bench_*; do
    [[ -f "${prog}" && -x "${prog}" ]] || continue
    echo "## $(basename "${prog}")"
    echo
    "${run_env[@]}" "${prog}" "$@" || rc=$?
    echo
  done
  return "${rc}"
}

out="${bench_dir}/results-$(date -u +%Y%m%dT%H%M%SZ).md"
set +e
run_all "$@" 2>&1 | tee "${out}"
rc=${PIPESTATUS[0]}
set -e
echo "(saved to ${out})"
exit "${rc}"
