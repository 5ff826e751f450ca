#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each, from its committed seed corpus (fuzz/corpus/<name>;
# new inputs go to a scratch copy, the committed corpus is only read), and prints one line per
# target: executions, corpus size, findings. Exits 1 when any target found a crash, a leak, a
# timeout or an out-of-memory (the reproducer is kept in BUILD_DIR/findings/).
#   run-fuzzers.sh BUILD_DIR [SECONDS]
set -uo pipefail
build="$(cd "$1" && pwd)"
seconds="${2:-60}"
src="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "${build}/findings"
failed=0
printf '%-16s %12s %10s %s\n' target executions corpus result
for bin in "${build}"/fuzz/fuzz_*; do
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
    failed=1
    grep -m 5 -E "ERROR: |SUMMARY: |==[0-9]+==" "${log}" >&2 || true
  fi
  printf '%-16s %12s %10s %s\n' "${name}" "${execs:-?}" "${units}" "${result}"
  rm -rf "${scratch}"
done
exit ${failed}
