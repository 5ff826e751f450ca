#!/usr/bin/env bash
# anvild on PostgreSQL (--store postgresql://...): a server of the test's own (anvil_test_postgres,
# initdb in a temporary folder, loopback), never the machine's.
#   1. a job trains, is served and exported; its rows are PostgreSQL's (read back with psql)
#   2. a second anvild with the same --instance on the same data dir is refused, naming the first
#   3. PostgreSQL stopped mid-run: requests get UNAVAILABLE (exit 5), never INTERNAL; restarted:
#      the job goes on and succeeds, its metric history holding each step once
#   4. kill -9 of anvild mid-run: a new anvild on the same database resumes the job from its
#      checkpoint, and its weights equal an uninterrupted run's
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" postgres-store
export ANVIL_LOG_LEVEL=info

"${build}/tests/fixtures/anvil_test_postgres" "${work}/pg.url" 2> "${work}/pg.log" &
pg_pid=$!
pids+=("${pg_pid}")
for _ in $(seq 600); do [[ -s "${work}/pg.url" ]] && break; sleep 0.1; done
[[ -s "${work}/pg.url" ]] || fail "PostgreSQL did not start: $(cat "${work}/pg.log")"
url=$(cat "${work}/pg.url")
psql_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/psql
sql() { "${psql_bin}" "${url}" -XAtq -c "$1"; }

start_server() {  # start_server DATA_DIR: anvild on the database; sets anvild_pid, grpc_port, cli
  : > "${work}/anvild.log"
  "${build}/server/anvild" --address 127.0.0.1:0 --metrics-address "" --data-dir "$1" --store "${url}" \
    --instance solo > "${work}/anvild.log" 2>&1 &
  anvild_pid=$!
  pids+=("${anvild_pid}")
  wait_for_grpc_port
  cli=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")
}
spec() {  # spec NAME EPOCHS > file
  cat <<JSON
{"name": "$1", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": $2, "batch_size": 32,
 "seed": 11, "metric_interval": 1, "checkpoint": {"every_steps": 25}}
JSON
}
submit() { "${cli[@]}" --json submit "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['job']['id'])"; }

echo "1. train, serve and export with the jobs in PostgreSQL"
start_server "${work}/data"
grep -q "job store: PostgreSQL at postgresql://.*this replica is 'solo'" "${work}/anvild.log" ||
  fail "the start line does not name the store and the replica"
spec quick 3 > "${work}/quick.json"
"${cli[@]}" submit "${work}/quick.json" --watch > "${work}/watch.txt" || fail "submit --watch"
grep -q SUCCEEDED "${work}/watch.txt" || fail "no SUCCEEDED"
printf '0.5,-1\n3,2.5\n' > "${work}/x.csv"
"${cli[@]}" predict quick --input "${work}/x.csv" > "${work}/pred.txt" || fail "predict"
"${cli[@]}" export quick --format native -o "${work}/quick.anvil" > /dev/null || fail "export"
[[ $(sql "SELECT state FROM jobs WHERE name = 'quick'") == "SUCCEEDED" ]] || fail "the job's row in PostgreSQL"
[[ $(sql "SELECT version FROM models WHERE name = 'quick'") == "1" ]] || fail "the model's row in PostgreSQL"
[[ $(sql "SELECT count(*) FROM metrics m JOIN jobs j ON j.id = m.job_id WHERE j.name = 'quick' AND m.kind = 'step'") -gt 0 ]] ||
  fail "no step events in PostgreSQL"
[[ ! -e "${work}/data/anvil.db" ]] || fail "anvild made a SQLite store beside PostgreSQL"

echo "2. a second anvild with the same --instance is refused"
second_rc=0
timeout 30 "${build}/server/anvild" --address 127.0.0.1:0 --metrics-address "" --data-dir "${work}/data" \
  --store "${url}" --instance solo > "${work}/second.log" 2>&1 || second_rc=$?
[[ ${second_rc} -ne 0 && ${second_rc} -ne 124 ]] || fail "the second anvild exited ${second_rc}"
grep -q "is in use by another anvild (pid ${anvild_pid}).*its own --instance" "${work}/second.log" ||
  fail "the second anvild did not say why: $(cat "${work}/second.log")"
"${cli[@]}" health > /dev/null || fail "the first anvild stopped answering"
[[ $("${cli[@]}" --json job "$(sql "SELECT id FROM jobs WHERE name = 'quick'")" |
  python3 -c "import json,sys; print(json.load(sys.stdin).get('replica', ''))") == "solo" ]] ||
  fail "the job does not name the replica that ran it"

echo "3. PostgreSQL stopped mid-run: UNAVAILABLE, then the job goes on"
spec outage 200 > "${work}/outage.json"
oid=$(submit "${work}/outage.json")
wait_for_step "${oid}" 30
kill -USR2 "${pg_pid}"  # stop
for _ in $(seq 100); do grep -q "stopped" "${work}/pg.log" && break; sleep 0.1; done
codes=()
for _ in 1 2 3; do
  rc=0
  "${cli[@]}" jobs > /dev/null 2> "${work}/gap.err" || rc=$?
  codes+=("${rc}")
  grep -q "INTERNAL" "${work}/gap.err" && fail "a request during the outage got INTERNAL: $(cat "${work}/gap.err")"
done
[[ "${codes[*]}" == "5 5 5" ]] || fail "exit codes during the outage: ${codes[*]} (expected 5: unavailable)"
echo "  during the outage: exit codes ${codes[*]} ($(grep -o "UNAVAILABLE" "${work}/gap.err" | head -1))"
sleep 1
kill -USR1 "${pg_pid}"  # start again, same port
for _ in $(seq 200); do "${cli[@]}" jobs > /dev/null 2>&1 && break; sleep 0.1; done
"${cli[@]}" watch "${oid}" > /dev/null || fail "the job did not finish after the outage: $(job_field "${oid}" reason)"
[[ $(job_field "${oid}" state) == "SUCCEEDED" ]] || fail "state after the outage: $(job_field "${oid}" state)"
check_history "${oid}"

echo "4. kill -9 of anvild mid-run: a new anvild resumes the job from its checkpoint"
spec crash 60 > "${work}/crash.json"
cid=$(submit "${work}/crash.json")
wait_for_step "${cid}" 130
kill -9 "${anvild_pid}"
wait "${anvild_pid}" 2> /dev/null || true
start_server "${work}/data"
"${cli[@]}" watch "${cid}" > /dev/null || fail "the resumed job did not succeed"
[[ $(job_field "${cid}" state) == "SUCCEEDED" ]] || fail "state after resume"
check_history "${cid}"
sed 's/"crash"/"straight"/' "${work}/crash.json" > "${work}/straight.json"
"${cli[@]}" submit "${work}/straight.json" --watch > /dev/null || fail "uninterrupted run"
"${cli[@]}" export crash --format safetensors -o "${work}/crash.safetensors" > /dev/null
"${cli[@]}" export straight --format safetensors -o "${work}/straight.safetensors" > /dev/null
same_weights "${work}/crash.safetensors" "${work}/straight.safetensors"
echo "PASS"
