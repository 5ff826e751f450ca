#!/usr/bin/env bash
# The layers' include rules (ctest "anvil_layering_test", label core), over the source tree,
# naming each offending line. The compiler enforces the rules between targets too (each
# library sees only its layers' include roots, cmake/AnvilIncludeRoots.cmake; the
# anvil_layering_* probes check it); this test also covers what one target holds (cuda/
# beside cpu/, common/) and files no target compiles:
#   core/      the engine: includes nothing of server/, workers/ or client/
#   workers/   includes nothing of server/ or client/
#   core/backend/cuda/  includes nothing of core/backend/cpu/ (shared host logic lives in
#              core/backend/common/ and core/ops/)
#   core/backend/common/  includes no backend (cpu/ or cuda/)
#   client/    talks to the service over gRPC only: nothing of server/ or workers/, except
#              server/tokens.h (`anvil token` edits the server's token file offline)
#   server/, workers/  ask what kernels run through core/backend/kernel_report.h: nothing of a
#              backend's own folder (core/backend/cpu/, core/backend/cuda/)
#   launcher/  the rank supervisor and anvil-run: includes nothing of core/, server/, workers/
#              or client/ (a process supervisor that any program, anvild's ranks too, can use),
#              except core/util/mutex.h (header-only: the annotated lock clang's analysis checks)
#   SOURCE_DIR defaults to the repository this script is in.
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "${root}"
status=0
check() {  # check FOLDER REGEX WHY [ALLOWED_REGEX]
  local hits
  hits=$(grep -rnE --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' --include='*.def' \
    "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"($2)" "$1" || true)
  [[ -n "${4:-}" && -n "${hits}" ]] && hits=$(grep -vE "$4" <<< "${hits}" || true)
  if [[ -n "${hits}" ]]; then
    echo "FAIL: $1 $3:" >&2
    echo "${hits}" >&2
    status=1
  fi
}
check core 'server/|workers/|client/|launcher/' "must not include the service's layers or the launcher"
check launcher 'core/|server/|workers/|client/' "must stay a plain process supervisor" '"core/util/mutex\.h"'
check workers 'server/|client/' "must not include the server or the client"
check core/backend/cuda 'core/backend/cpu/' "must not include the CPU backend (shared logic: core/backend/common/)"
check core/backend/common 'core/backend/(cpu|cuda)/' "must not include a backend"
check server 'core/backend/(cpu|cuda)/' "must not reach into a backend (ask core/backend/kernel_report.h)"
check workers 'core/backend/(cpu|cuda)/' "must not reach into a backend (ask core/backend/kernel_report.h)"
check client 'server/|workers/' "must reach the service over gRPC only" '"server/tokens\.h"' 
[[ ${status} -eq 0 ]] && echo "ok: layering"
exit ${status}
