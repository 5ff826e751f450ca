# Shared by the system tests that run a real anvild beside another program (sourced, not run):
#   source anvild_lib.sh BUILD_DIR TAG   sets build, work (a temporary folder removed at exit),
#                                         fail, and cleanup of every pid in `pids`
#   start_anvild [ENV=VALUE...]           starts anvild on free ports, with the given
#                                         environment; sets grpc_port and metrics_port
#   wait_for_grpc_port                    for an anvild started by the caller with its log in
#                                         ${work}/anvild.log: sets grpc_port once it listens
#   use_peer_python SOURCE_DIR MODULE...  sets `python` to the peers' venv (.venv, from
#                                         scripts/install-test-peers.sh), or skips the test
#                                         (exit 0, saying why) when a module is not there
#   job_field ID FIELD                    a field of job ID (through the caller's `cli` array)
#   wait_for_step ID STEP                 until job ID reports STEP or more (30 s at most)
#   same_weights A B                      the tensors of two safetensors files are bitwise equal
#   write_pixels_csv PATH                 64 rows of three raw pixel values in [0, 255] and a
#                                         0/1 label: the doctor's INPUT_NOT_NORMALIZED fires
#   check_history ID                      job ID's stored stream (through the caller's `cli`
#                                         array) holds steps 1..N, each once
build="$(cd "$1" && pwd)"
work="$(mktemp -d "/tmp/anvil-$2-XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "${p}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "${work}"
}
trap cleanup EXIT
# Whatever ends a script under `set -e` names itself: the line and the command that failed.
trap 'echo "FAIL: line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
fail() { echo "FAIL: $*" >&2; [[ -f "${work}/anvild.log" ]] && tail -20 "${work}/anvild.log" >&2; exit 1; }

use_peer_python() {
  python="$1/.venv/bin/python"
  shift
  local modules
  modules=$(IFS=,; echo "$*")
  if ! "${python}" -c "import ${modules}" 2> /dev/null; then
    echo "SKIP: ${modules} not installed in the peers' venv (scripts/install-test-peers.sh)"
    exit 0
  fi
}

# The first number the log names after PATTERN (nothing yet when the log is not written: the
# shell opens a background command's redirection in the child, which may not have run yet).
port_in_log() {
  sed -n "s/.*$1\\([0-9]*\\).*/\\1/p" "${work}/anvild.log" 2> /dev/null || true
}

wait_for_grpc_port() {
  grpc_port=""
  for _ in $(seq 100); do
    grpc_port=$(port_in_log "listening on 127.0.0.1:")
    [[ -n "${grpc_port}" ]] && return 0
    sleep 0.1
  done
  fail "anvild did not start"
}

start_anvild() {
  : > "${work}/anvild.log"
  env "$@" "${build}/server/anvild" --address 127.0.0.1:0 --metrics-address 127.0.0.1:0 --data-dir "${work}/data" \
    > "${work}/anvild.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    grpc_port=$(port_in_log "listening on 127.0.0.1:")
    metrics_port=$(port_in_log "metrics on http:\\/\\/127.0.0.1:")
    [[ -n "${grpc_port}" && -n "${metrics_port}" ]] && return 0
    sleep 0.1
  done
  fail "anvild did not start"
}

job_field() { "${cli[@]}" --json job "$1" | python3 -c "import json,sys; print(json.load(sys.stdin).get('$2', 0))"; }

wait_for_step() {  # a job the server cannot answer for a moment (restarting) counts as step 0
  for _ in $(seq 600); do
    [[ $(job_field "$1" step 2> /dev/null || echo 0) -ge $2 ]] && return 0
    sleep 0.05
  done
  fail "job $1 never reached step $2"
}

write_pixels_csv() {
  python3 -c "
import random
random.seed(3)
print('a,b,c,label')
for i in range(64):
    print(','.join(str(random.randrange(256)) for _ in range(3)) + ',' + str(i % 2))" > "$1"
}

same_weights() {  # the tensor bytes of two safetensors files are equal (headers may differ in names)
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

check_history() {  # every step once, in order, in job $1's stored stream (metric_interval 1)
  "${cli[@]}" --json watch "$1" > "${work}/history.jsonl"
  python3 - "${work}/history.jsonl" <<'PY' || fail "metric history of $1 has gaps or duplicates"
import json, sys
steps = [int(e.get("step", 0)) for e in map(json.loads, open(sys.argv[1])) if "step_metrics" in e]
assert steps == list(range(1, len(steps) + 1)), steps[:50]
print(f"  history: steps 1..{len(steps)}, each once")
PY
}
