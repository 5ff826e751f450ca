#!/usr/bin/env bash
# The CLI against a real anvild with TLS and tokens (ctest label "fault"): `anvil token create`
# writes the token file the running server reads; calls without a token, with the wrong scope,
# or without trusting the server's CA fail with the right message; health stays open.
#   auth_cli_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" auth
src="$(cd "$2" && pwd)"
"${src}/scripts/dev-ca.sh" "${work}/ca" > /dev/null
mkdir -p "${work}/data"
anvil=("${build}/client/anvil")
"${build}/server/anvild" --address 127.0.0.1:0 --metrics-address "" --data-dir "${work}/data" \
  --tls-cert "${work}/ca/server.pem" --tls-key "${work}/ca/server.key" > "${work}/anvild.log" 2>&1 &
pids+=($!)
wait_for_grpc_port
grep -q "transport TLS" "${work}/anvild.log" || fail "the transport is not logged as TLS"
tls=(--server "127.0.0.1:${grpc_port}" --tls-ca "${work}/ca/ca.pem")  # an IP literal: no DNS lookup
# The server re-reads its token file at most once a second: wait until a call shows the change.
within_30s() {
  local until=$((SECONDS + 30))
  until "$@" > /dev/null 2>&1; do
    ((SECONDS < until)) || return 1
    sleep 0.1
  done
}
fails() { ! "$@"; }

# No tokens yet: TLS alone.
"${anvil[@]}" "${tls[@]}" jobs > /dev/null || fail "jobs over TLS without tokens configured"
# Plaintext against a TLS port fails.
if "${anvil[@]}" --server "127.0.0.1:${grpc_port}" jobs > /dev/null 2>&1; then fail "plaintext reached a TLS port"; fi

train=$("${anvil[@]}" token create --data-dir "${work}/data" --name ci-train --scope train 2> /dev/null)
serve=$("${anvil[@]}" token create --data-dir "${work}/data" --name ci-serve --scope serve 2> /dev/null)
[[ "${train}" == anvil_* ]] || fail "token create printed \"${train}\""
"${anvil[@]}" token list --data-dir "${work}/data" | grep -q "ci-train *train" || fail "token list"
within_30s fails "${anvil[@]}" "${tls[@]}" jobs || fail "the server did not take up its new token file"

out=$("${anvil[@]}" "${tls[@]}" jobs 2>&1) && fail "jobs without a token succeeded"
grep -q "expected a bearer token" <<< "${out}" || fail "no-token message: ${out}"
out=$("${anvil[@]}" "${tls[@]}" --token "${serve}" jobs 2>&1) && fail "jobs with a serve token succeeded"
grep -q "lacks the \"train\" scope" <<< "${out}" || fail "scope message: ${out}"
ANVIL_TOKEN="${train}" "${anvil[@]}" "${tls[@]}" jobs > /dev/null || fail "jobs with the train token"
"${anvil[@]}" "${tls[@]}" health > /dev/null || fail "health needs no token"
# The Python client carries the same options: a job, its stream, a prediction and an export.
both=$("${anvil[@]}" token create --data-dir "${work}/data" --name ci-both --scope train,serve 2> /dev/null)
within_30s "${anvil[@]}" "${tls[@]}" --token "${both}" jobs || fail "a new token was not accepted"
/usr/bin/python3 "${src}/examples/python/anvil_client.py" --server "127.0.0.1:${grpc_port}" --stubs "${build}/python" \
  --tls-ca "${work}/ca/ca.pem" --token "${both}" --name py-auth > "${work}/py.log" 2>&1 \
  || { cat "${work}/py.log" >&2; fail "the Python client over TLS with a token"; }
"${anvil[@]}" token revoke --data-dir "${work}/data" ci-train
within_30s fails "${anvil[@]}" "${tls[@]}" --token "${train}" jobs || fail "a revoked token still works"
echo "ok: TLS, token scopes, revocation"
