#!/usr/bin/env bash
# A connection flood against a real anvild (ctest label "fault"):
#   1. `ulimit -n 1024` and 1,100 connections held open at once, then closed: anvild raised its
#      own fd limit at start, so nothing failed and it answers at once.
#   2. the fd table made small on purpose (--max-open-files 200) and 300 connections: accept4()
#      fails with EMFILE, gRPC 1.51's listener stops for good, and the watchdog rebuilds it:
#      once the flood's connections close, health answers SERVING again within seconds.
#   connection_flood_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" flood

flood() {  # flood PORT COUNT: open COUNT connections at once, hold them 2 s, close them
  /usr/bin/python3 - "$1" "$2" <<'PY'
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(count):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        held.append(s)
    except OSError:
        pass
time.sleep(2)
for s in held:
    s.close()
print(f"held {len(held)} connections")
PY
}

healthy_within() {  # healthy_within SECONDS
  local until=$((SECONDS + $1))
  while ((SECONDS < until)); do
    "${build}/client/anvil" --server "127.0.0.1:${grpc_port}" health > /dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

# 1. The operator's ulimit of 1024. (Each log is emptied before its server starts, so the wait
# cannot read a port from a log the child has not opened yet, or from the previous server's.)
: > "${work}/anvild.log"
(ulimit -n 1024; exec "${build}/server/anvild" --address 127.0.0.1:0 --metrics-address "" \
  --data-dir "${work}/data1" > "${work}/anvild.log" 2>&1) &
pids+=($!)
wait_for_grpc_port
grep -q "open files: up to" "${work}/anvild.log" || fail "the fd limit is not logged"
flood "${grpc_port}" 1100
healthy_within 30 || fail "after 1,100 connections under ulimit -n 1024 the server does not answer"
if grep -q "Failed accept4" "${work}/anvild.log"; then
  # Only where the process may not raise its limit (not root): then the watchdog must have acted.
  grep -q "accepting again" "${work}/anvild.log" || fail "accept4 failed and the listener was not restarted"
fi
echo "ok: 1,100 connections under ulimit -n 1024"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true

# 2. A deliberately small fd table: the listener dies and is rebuilt. The metrics address is
#    flooded too: its accept4 fails with EMFILE as well, and its loop must pause, not spin.
: > "${work}/anvild.log"
metrics_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${build}/server/anvild" --address 127.0.0.1:0 --metrics-address "127.0.0.1:${metrics_port}" \
  --data-dir "${work}/data2" --max-open-files 200 > "${work}/anvild.log" 2>&1 &
anvild_pid=$!
pids+=("${anvild_pid}")
wait_for_grpc_port
cpu_ticks() { awk '{print $14 + $15}' "/proc/${anvild_pid}/stat"; }
flood "${grpc_port}" 300 &
flood_pid=$!
# Once gRPC's accept4 has failed the fd table is full: the metrics flood meets EMFILE too.
for _ in $(seq 100); do grep -q "Failed accept4" "${work}/anvild.log" && break; sleep 0.02; done
before=$(cpu_ticks)
flood "${metrics_port}" 50
spent=$(($(cpu_ticks) - before))
wait "${flood_pid}"
ticks=$(getconf CLK_TCK)
echo "anvild used ${spent} ticks of CPU (${ticks}/s) during the 2 s metrics flood"
# Spinning on a readable listener whose accept4 fails would burn a core: 2 s of ticks.
((spent < ticks * 3 / 2)) || fail "anvild used ${spent} CPU ticks (${ticks}/s) while out of fds: a loop spins"
grep -q "Failed accept4" "${work}/anvild.log" || fail "the flood did not exhaust the fd table (the test proves nothing)"
healthy_within 30 || fail "the listener did not come back after the fds were freed"
grep -q "accepting again" "${work}/anvild.log" || fail "no restart of the listener was logged"
grep -E "Failed accept4|stopped accepting|accepting again" "${work}/anvild.log" | head -4
status=$(/usr/bin/python3 - "${metrics_port}" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
print(s.recv(64).split(b"\r\n")[0].decode())
PY
)
[[ ${status} == "HTTP/1.1 200 OK" ]] || fail "the metrics address does not answer after the flood: ${status}"
echo "ok: accept4 EMFILE, listener rebuilt, serving again"
