#!/usr/bin/env bash
# The image's entrypoint: anvild listens on 0.0.0.0 in the container, so it runs with TLS. When
# no certificate is mounted at $ANVILD_TLS_CERT, a development CA and a server certificate are
# made once in the data volume (clients trust its ca.pem: `docker compose cp
# anvild:/var/lib/anvil/tls/ca.pem .` then `anvil --tls-ca ca.pem --server localhost:50051`).
# Mount real certificates over them for anything beyond development.
set -euo pipefail
if [[ -n "${ANVILD_TLS_CERT:-}" && ! -f "${ANVILD_TLS_CERT}" ]]; then
  anvil-dev-ca "$(dirname "${ANVILD_TLS_CERT}")" anvild "$(hostname)"
fi
exec anvild "$@"
