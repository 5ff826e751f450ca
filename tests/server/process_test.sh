#!/usr/bin/env bash
# Process-level tests with the real binaries (ctest label "server"):
#   1. submit --watch -> predict -> export (the CLI checks the SHA-256; sha256sum re-checks)
#   2. kill -9 during training three times, each after progress, restart: the job finishes from
#      its checkpoint (the crash-loop guard counts only deaths without progress), its metric
#      history holds every step once, and its weights equal an uninterrupted run's
#   3. SIGTERM drains: exit 0 within 10 s, the running job INTERRUPTED, resumed on restart
#   (1 also: a second anvild on the same data directory is refused)
#   4. the Python client (stubs from protoc's gRPC Python plugin) against the same server
#   process_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
src="$(cd "$2" && pwd)"
work="$(mktemp -d /tmp/anvil-process-XXXXXX)"
anvild_pid=""
cleanup() {
  [[ -n "${anvild_pid}" ]] && kill -9 "${anvild_pid}" 2>/dev/null || true
  rm -rf "${work}"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [[ -f "${work}/anvild.log" ]] && tail -20 "${work}/anvild.log" >&2; exit 1; }

start_server() {
  : > "${work}/anvild.log"
  "${build}/server/anvild" --address 127.0.0.1:0 --data-dir "${work}/data" >> "${work}/anvild.log" 2>&1 &
  anvild_pid=$!
  for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "${work}/anvild.log" | tail -1)
    [[ -n "${port}" ]] && break
    sleep 0.1
  done
  [[ -n "${port}" ]] || fail "anvild did not start"
  cli=("${build}/client/anvil" --server "127.0.0.1:${port}")
}

job_field() {  # job_field ID FIELD
  "${cli[@]}" --json job "$1" | python3 -c "import json,sys; print(json.load(sys.stdin).get('$2', 0))"
}

wait_for_step() {  # wait_for_step ID STEP
  for _ in $(seq 300); do
    [[ $(job_field "$1" step) -ge $2 ]] && return 0
    sleep 0.05
  done
  fail "job $1 never reached step $2"
}

spec() {  # spec NAME EPOCHS > file
  cat <<JSON
{"name": "$1", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": $2, "batch_size": 32,
 "seed": 11, "metric_interval": 1, "checkpoint": {"every_steps": 25}}
JSON
}

# Each step once and in order in a job's stored stream (replayed from step 0).
check_history() {
  "${cli[@]}" --json watch "$1" > "${work}/history.jsonl"
  python3 - "${work}/history.jsonl" <<'PY' || fail "metric history of $1 has gaps or duplicates"
import json, sys
steps = [int(e.get("step", 0)) for e in map(json.loads, open(sys.argv[1])) if "step_metrics" in e]
assert steps == list(range(1, len(steps) + 1)), steps[:50]
print(f"  history: steps 1..{len(steps)}, each once")
PY
}

# The tensor bytes of two safetensors files are equal (headers may differ in names).
same_weights() {
  python3 - "$1" "$2" <<'PY' || fail "weights differ: $1 $2"
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), "different"
print(f"  {len(a)} tensors bitwise equal")
PY
}

echo "1. the start line and health --verbose, then submit, watch, predict, export"
start_server
# One line at start names the CPU, the ISA level, the GEMM kernel and the threads; health
# --verbose prints the same facts from the running server.
start_line=$(grep -m1 " CPU .*, ISA .*, GEMM .*threads" "${work}/anvild.log") || fail "no CPU/ISA/GEMM line at start"
"${cli[@]}" health --verbose > "${work}/health.txt" || fail "health --verbose"
isa=$(sed -n 's/^isa: *\([a-z0-9]*\).*/\1/p' "${work}/health.txt")
gemm=$(sed -n 's/^gemm: *//p' "${work}/health.txt")
[[ -n "${isa}" && -n "${gemm}" ]] || fail "health --verbose printed $(cat "${work}/health.txt")"
[[ "${start_line}" == *"ISA ${isa}"* && "${start_line}" == *"GEMM ${gemm},"* ]] ||
  fail "start line '${start_line}' and health --verbose (isa ${isa}, gemm ${gemm}) disagree"
head -1 "${work}/health.txt" | grep -qx SERVING || fail "health --verbose: first line should be SERVING"
bf16=$(sed -n 's/^bf16: *//p' "${work}/health.txt")
[[ -n "${bf16}" && "${start_line}" == *"bf16 GEMM ${bf16},"* ]] ||
  fail "start line '${start_line}' and health --verbose (bf16 ${bf16}) disagree"
# A second anvild on the same data directory refuses to start, naming the first one's pid.
set +e
timeout 20 "${build}/server/anvild" --address 127.0.0.1:0 --metrics-address "" --data-dir "${work}/data" \
  > "${work}/second.log" 2>&1
second_rc=$?
set -e
[[ ${second_rc} -ne 0 && ${second_rc} -ne 124 ]] || fail "a second anvild on the data directory exited ${second_rc}"
grep -q "is in use by another anvild (pid ${anvild_pid})" "${work}/second.log" ||
  fail "the second anvild did not say why: $(cat "${work}/second.log")"
"${cli[@]}" health > /dev/null || fail "the first anvild stopped answering after the second was refused"
spec quick 3 > "${work}/quick.json"
"${cli[@]}" submit "${work}/quick.json" --watch > "${work}/watch.txt" || fail "submit --watch"
grep -q "SUCCEEDED" "${work}/watch.txt" || fail "no SUCCEEDED in the watch output"
printf '0.5,-1\n3,2.5\n' > "${work}/x.csv"
"${cli[@]}" predict quick --input "${work}/x.csv" > "${work}/pred.txt" || fail "predict"
[[ $(grep -c "^sample" "${work}/pred.txt") -eq 2 ]] || fail "predict printed $(cat "${work}/pred.txt")"
"${cli[@]}" export quick --format native -o "${work}/quick.anvil" > "${work}/export.txt" || fail "export"
grep -q "$(sha256sum "${work}/quick.anvil" | cut -c1-64)" "${work}/export.txt" || fail "export hash"
set +e
"${cli[@]}" predict nope --input "${work}/x.csv" 2> /dev/null
[[ $? -eq 4 ]] || fail "an unknown model should exit 4"
set -e

echo "2. kill -9 during training three times, restart, finish from the checkpoint"
spec crash 60 > "${work}/crash.json"
id=$("${cli[@]}" --json submit "${work}/crash.json" | python3 -c "import json,sys; print(json.load(sys.stdin)['job']['id'])")
# Three deaths, each after the job checkpointed further (every 25 steps): none is the job's
# fault, so the crash-loop guard (2 resumes without progress) must not fail it.
for at in 60 110 160; do
  wait_for_step "${id}" "${at}"
  kill -9 "${anvild_pid}"
  wait "${anvild_pid}" 2>/dev/null || true
  start_server
done
"${cli[@]}" watch "${id}" > /dev/null || fail "the job resumed three times did not succeed: $(job_field "${id}" reason)"
[[ $(job_field "${id}" state) == "SUCCEEDED" ]] || fail "state after resume"
check_history "${id}"
python3 - "${work}/history.jsonl" <<'PY' || fail "the three deaths were not each counted as the first without progress"
import json, sys
said = [e.get("message", "") for e in map(json.loads, open(sys.argv[1]))]
resumes = [m for m in said if "the server stopped under it 1 of at most 2 times without progress" in m]
assert len(resumes) == 3 and not any("2 of at most" in m for m in said), said
print(f"  3 resumes after kill -9, each counted once: {resumes[-1]}")
PY
sed 's/"crash"/"straight"/' "${work}/crash.json" > "${work}/straight.json"
"${cli[@]}" submit "${work}/straight.json" --watch > /dev/null || fail "uninterrupted run"
"${cli[@]}" export crash --format safetensors -o "${work}/crash.safetensors" > /dev/null
"${cli[@]}" export straight --format safetensors -o "${work}/straight.safetensors" > /dev/null
same_weights "${work}/crash.safetensors" "${work}/straight.safetensors"

echo "3. SIGTERM drains"
spec drained 60 > "${work}/drained.json"
id=$("${cli[@]}" --json submit "${work}/drained.json" | python3 -c "import json,sys; print(json.load(sys.stdin)['job']['id'])")
wait_for_step "${id}" 100
start=$(date +%s%N)
kill -TERM "${anvild_pid}"
wait "${anvild_pid}" || fail "anvild exited with $? on SIGTERM"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[[ ${elapsed_ms} -lt 10000 ]] || fail "drain took ${elapsed_ms} ms"
echo "  drained in ${elapsed_ms} ms"
start_server
state=$(job_field "${id}" state)
[[ "${state}" == "QUEUED" || "${state}" == "RUNNING" || "${state}" == "SUCCEEDED" ]] || fail "state after restart: ${state}"
"${cli[@]}" watch "${id}" > /dev/null || fail "the drained job did not finish after the restart"
check_history "${id}"

echo "4. the Python client"
if /usr/bin/python3 -c "import grpc, google.protobuf" 2> /dev/null && [[ -f "${build}/python/anvil/v1/anvil_pb2_grpc.py" ]]; then
  /usr/bin/python3 "${src}/examples/python/anvil_client.py" --server "127.0.0.1:${port}" --stubs "${build}/python" \
    > "${work}/python.txt" || { cat "${work}/python.txt"; fail "python client"; }
  tail -1 "${work}/python.txt"
else
  fail "python3-grpcio / python3-protobuf or the generated stubs are missing (make deps installs them)"
fi
kill -TERM "${anvild_pid}"
wait "${anvild_pid}"
anvild_pid=""
echo "all process tests passed"
