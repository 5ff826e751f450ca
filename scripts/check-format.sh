#!/usr/bin/env bash
# The C++ sources' formatting (.clang-format, clang-format 14 from Debian):
#   check-format.sh          lists every tracked file clang-format would change; fails if any
#   check-format.sh --fix    rewrites them in place
# Covers every folder with C++ (the engine, the service, workers, client, tests, benchmarks,
# examples, fuzzers); the X-macro tables (*.def) are laid out by hand and left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
formatter="$(command -v clang-format-14 || command -v clang-format || true)"
[[ -n "${formatter}" ]] || { echo "check-format: clang-format is not installed (scripts/install-deps.sh lint)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  printf '%s\0' "${files[@]}" | xargs -0 -P "$(nproc)" -n 16 "${formatter}" -i
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "${formatter}" --dry-run -Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not formatted (make format fixes them):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
