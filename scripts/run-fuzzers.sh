#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each, from its committed seed corpus (fuzz/corpus/<name>;
# new inputs go to a scratch copy, the committed corpus is only read), JOBS targets at a time
# (default: the number of cores; each target is one process on one core), and prints one line per
# target, in name order: executions, corpus size, findings. Exits 1 when any target found a crash,
# a leak, a timeout or an out-of-memory (the reproducer is kept in BUILD_DIR/findings/).
#   run-fuzzers.sh BUILD_DIR [SECONDS] [JOBS]
set -uo pipefail
build="$(cd "$1" && pwd)"
seconds="${2:-60}"
jobs="${3:-$(nproc)}"
src="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "${build}/findings"

# One target: its log in findings/NAME.log, its summary line in findings/NAME.result.
fuzz_one() {
  local bin="$1" name scratch log rc execs units result
  name="$(basename "${bin}")"
  name="${name#fuzz_}"
  scratch="$(mktemp -d "/tmp/anvil-fuzz-${name}-XXXXXX")"
  log="${build}/findings/${name}.log"
  ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1 \
    "${bin}" -max_total_time="${seconds}" -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="${build}/findings/${name}-" "${scratch}" "${src}/fuzz/corpus/${name}" > "${log}" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -1)
  units=$(find "${scratch}" "${src}/fuzz/corpus/${name}" -type f | wc -l)
  if [[ ${rc} -eq 0 ]]; then
    result="no findings"
  else
    result="FINDING (exit ${rc}; see ${log})"
    grep -m 5 -E "ERROR: |SUMMARY: |==[0-9]+==" "${log}" >&2 || true
  fi
  printf '%-16s %12s %10s %s\n' "${name}" "${execs:-?}" "${units}" "${result}" > "${build}/findings/${name}.result"
  rm -rf "${scratch}"
  [[ ${rc} -eq 0 ]]
}

targets=("${build}"/fuzz/fuzz_*)
[[ -x "${targets[0]}" ]] || { echo "run-fuzzers: no fuzz targets in ${build}/fuzz" >&2; exit 1; }
rm -f "${build}"/findings/*.result
echo "${#targets[@]} targets, ${seconds} s each, ${jobs} at a time"
failed=0
running=0
for bin in "${targets[@]}"; do
  if ((running >= jobs)); then
    wait -n || failed=1
    running=$((running - 1))
  fi
  fuzz_one "${bin}" &
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || failed=1
  running=$((running - 1))
done
printf '%-16s %12s %10s %s\n' target executions corpus result
cat "${build}"/findings/*.result
exit ${failed}
