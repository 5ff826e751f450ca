#!/usr/bin/env bash
# Replicas: several anvild sharing one PostgreSQL (a server of the test's own), claiming jobs
# under leases, each with a data dir of its own, their artifacts in one S3 server (moto's,
# started by the test) or in one folder they share (the partition mode).
#   replicas_test.sh BUILD_DIR exactly-once
#     1. 30 jobs submitted round-robin to 3 replicas each run exactly once: proven from the
#        store's claim history (one claim per job) and from the artifacts (one model archive
#        per job, one TensorBoard run per job)
#     2. kill -9 of a replica running 2 jobs: both finish on the others, their weights bitwise
#        equal to uninterrupted runs'; a stream opened on another replica before the kill follows
#        the job live across the failover, gap-free, to SUCCEEDED
#     3. CancelJob on a replica that does not run the job reaches the one that does
#     4. Predict through the CLI given all three addresses, one replica killed with -9 and one
#        drained (SIGTERM: NOT_SERVING) mid-load: round_robin with health checking and the
#        retry policy leave 0 failed calls
#     (1 also: a model trained on one replica is served by another with identical outputs, and
#     an export from the other streams the bytes the trainer wrote, its SHA-256 checked; 2 also:
#     the replicas that take the jobs over resume them from checkpoints they read from S3)
#   replicas_test.sh BUILD_DIR partition   (root: network namespaces)
#     PostgreSQL and two replicas in namespaces of their own on a bridge, their artifacts in one
#     shared folder (--artifacts DIR), each with a data dir of its own. Replica 1's link goes
#     down mid-run: it stops the run before its lease can lapse, replica 2 takes the job over
#     after the lapse and finishes it; when the link returns, replica 1's late write is refused
#     by the fencing epoch (its log and anvil_store_fenced_writes_total say so) and the job's row
#     stays replica 2's, naming a checkpoint of replica 2's lease epoch.
#   replicas_test.sh BUILD_DIR span
#     Three replicas of --rank-slots 1 (artifacts in one shared folder): a data-parallel job of
#     2 ranks runs as node 0 where it was claimed and node 1 on another replica, the ranks
#     meeting in PostgreSQL. kill -9 of node 1's replica mid-run: node 0 restarts the attempt,
#     the third replica takes node 1 from the published checkpoint. Then that replica is frozen
#     (SIGSTOP with its ranks): node 0 sees its lease on node 1 lapse, restarts the attempt, and
#     the first replica, restarted, takes node 1; thawed, the frozen one stops its stale node.
#     The job succeeds under its one claim, each step once in its history, and its weights equal
#     bitwise those of the same job run with both ranks on one replica.
set -euo pipefail
mode=$2
source "$(dirname "$0")/anvild_lib.sh" "$1" "replicas-${mode}"
export ANVIL_LOG_LEVEL=info
psql_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/psql

spec() {  # spec NAME EPOCHS > file
  cat <<JSON
{"name": "$1", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": $2, "batch_size": 32,
 "seed": 11, "metric_interval": 5, "checkpoint": {"every_steps": 25}}
JSON
}

start_postgres() {  # start_postgres [NETNS]: sets pg_pid, url
  local prefix=()
  [[ -n "${1:-}" ]] && prefix=(ip netns exec "$1")
  "${prefix[@]}" "${build}/tests/fixtures/anvil_test_postgres" "${work}/pg.url" 2> "${work}/pg.log" &
  pg_pid=$!
  pids+=("${pg_pid}")
  for _ in $(seq 600); do [[ -s "${work}/pg.url" ]] && break; sleep 0.1; done
  [[ -s "${work}/pg.url" ]] || fail "PostgreSQL did not start: $(cat "${work}/pg.log")"
  url=$(cat "${work}/pg.url")
}
sql() { "${psql_bin}" "${url}" -XAtq -c "$1"; }

# The artifacts: in S3 once start_s3 ran, in the folder shared_artifacts names once set
# (each replica's data dir its own then), else in one shared data dir.
s3=""
start_s3() {  # start_s3: sets s3 (the endpoint), or skips the test without moto
  local python="$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python" rc=0
  "${build}/tests/fixtures/anvil_test_s3" "${python}" "${work}/s3.url" 2> "${work}/s3.err" &
  pids+=("$!")
  for _ in $(seq 300); do
    [[ -s "${work}/s3.url" ]] && break
    kill -0 "$!" 2> /dev/null || { wait "$!" || rc=$?; break; }
    sleep 0.1
  done
  [[ ${rc} -eq 77 ]] && { echo "SKIP: $(cat "${work}/s3.err")"; exit 77; }
  [[ -s "${work}/s3.url" ]] || fail "the S3 server did not start: $(cat "${work}/s3.err")"
  s3=$(cat "${work}/s3.url")
  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
}
# The bytes of an object and their SHA-256 recorded as its metadata, read with boto3.
s3_get() {  # s3_get KEY FILE: prints the recorded SHA-256
  "$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python" - "${s3}" "$1" "$2" <<'PY'
import boto3, sys
o = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1").get_object(Bucket="anvil", Key="replicas/" + sys.argv[2])
open(sys.argv[3], "wb").write(o["Body"].read())
print(o["Metadata"]["sha256"])
PY
}
shared_artifacts=""
data_of() { if [[ -n "${s3}${shared_artifacts}" ]]; then echo "${work}/data-$1"; else echo "${work}/shared"; fi; }

declare -A port pid
start_replica() {  # start_replica NAME [NETNS [EXTRA ARGS...]]: sets port[NAME], pid[NAME]
  local name=$1 ns=${2:-}
  shift 2 || shift $#
  local prefix=() artifacts=()
  [[ -n "${ns}" ]] && prefix=(ip netns exec "${ns}")
  [[ -n "${s3}" ]] && artifacts=(--artifacts s3://anvil/replicas --s3-endpoint "${s3}")
  [[ -n "${shared_artifacts}" ]] && artifacts=(--artifacts "${shared_artifacts}")
  : > "${work}/${name}.log"
  "${prefix[@]}" "${build}/server/anvild" --address 127.0.0.1:0 --metrics-address 127.0.0.1:0 \
    --data-dir "$(data_of "${name}")" --store "${url}" --instance "${name}" --lease-seconds 3 --devices cpu \
    "${artifacts[@]}" "$@" \
    > "${work}/${name}.log" 2>&1 &
  pid[${name}]=$!
  pids+=("$!")
  for _ in $(seq 200); do
    port[${name}]=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "${work}/${name}.log")
    [[ -n "${port[${name}]}" ]] && return 0
    sleep 0.1
  done
  fail "replica ${name} did not start: $(tail -5 "${work}/${name}.log")"
}
cli() {  # cli NAME [NETNS] -- ARGS...: the anvil CLI against replica NAME
  local name=$1 ns=""
  shift
  [[ "$1" != "--" ]] && { ns=$1; shift; }
  shift
  if [[ -n "${ns}" ]]; then
    ip netns exec "${ns}" "${build}/client/anvil" --server "127.0.0.1:${port[${name}]}" "$@"
  else
    "${build}/client/anvil" --server "127.0.0.1:${port[${name}]}" "$@"
  fi
}
job_id() { python3 -c "import json,sys; print(json.load(sys.stdin)['job']['id'])"; }
wait_sql() {  # wait_sql SQL EXPECTED SECONDS WHAT
  for _ in $(seq $(($3 * 10))); do
    [[ $(sql "$1") == "$2" ]] && return 0
    sleep 0.1
  done
  fail "$4: $(sql "$1") (expected $2)"
}
mkdir -p "${work}/shared"

case "${mode}" in
exactly-once)
  start_s3
  start_postgres
  for r in r1 r2 r3; do start_replica "${r}"; done
  echo "1. 30 jobs round-robin to 3 replicas: each runs exactly once"
  ids=()
  for i in $(seq 0 29); do
    r="r$((i % 3 + 1))"
    spec "rr-${i}" 2 > "${work}/rr.json"
    ids+=("$(cli "${r}" -- --json submit "${work}/rr.json" | job_id)")
  done
  wait_sql "SELECT count(*) FROM jobs WHERE state = 'SUCCEEDED'" 30 240 "jobs succeeded"
  [[ $(sql "SELECT count(*) FROM jobs") == 30 ]] || fail "jobs in the store: $(sql "SELECT count(*) FROM jobs")"
  [[ $(sql "SELECT count(*) FROM claims") == 30 ]] || fail "claims: $(sql "SELECT job_id, epoch, owner FROM claims")"
  [[ $(sql "SELECT count(DISTINCT job_id) FROM claims") == 30 ]] || fail "a job was claimed twice"
  [[ $(sql "SELECT count(*) FROM jobs j JOIN claims c ON c.job_id = j.id AND c.owner = j.owner") == 30 ]] ||
    fail "a job's row names another replica than its claim"
  used=$(sql "SELECT count(DISTINCT owner) FROM claims")
  [[ ${used} -ge 2 ]] || fail "only ${used} replica(s) ran jobs"
  echo "  claims per replica: $(sql "SELECT string_agg(owner || '=' || n, ' ') FROM (SELECT owner, count(*) AS n FROM claims GROUP BY owner ORDER BY owner) t")"
  # The artifacts: one registered archive per job, and one TensorBoard run per job (a second
  # run of a job would have opened a second event file).
  [[ $(sql "SELECT count(*) FROM models") == 30 ]] || fail "models registered: $(sql "SELECT count(*) FROM models")"
  for id in "${ids[@]}"; do
    runs=$(find "${work}"/data-*/jobs/"${id}"/tensorboard -name 'events.out.tfevents.*' 2> /dev/null | wc -l)
    [[ ${runs} -eq 1 ]] || fail "job ${id} has ${runs} TensorBoard runs"
    archive=$(sql "SELECT path FROM models WHERE job_id = '${id}'")
    recorded=$(s3_get "${archive}" "${work}/archive.bin") || fail "job ${id}'s archive ${archive} is not in S3"
    [[ $(sha256sum "${work}/archive.bin" | cut -c1-64) == "${recorded}" ]] || fail "${archive}: bytes and SHA-256 differ"
  done
  echo "  30 jobs, 30 claims, 30 archives in S3 (each SHA-256 as recorded), 30 TensorBoard runs"
  # Each replica names itself in /metrics; the status page says which replica ran each job.
  mport=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "${work}/r2.log")
  curl -sf "http://127.0.0.1:${mport}/metrics" | grep -q '^anvil_replica_info{replica="r2",store="postgresql"} 1' ||
    fail "r2's /metrics does not name it"
  curl -sf "http://127.0.0.1:${mport}/status.json" | python3 -c "
import json, sys
jobs = json.load(sys.stdin)['jobs']
assert jobs and all(j['replica'] in ('r1', 'r2', 'r3') for j in jobs), jobs[:2]
print('  status page: replicas', sorted({j['replica'] for j in jobs}))" || fail "the status page does not name the replicas"
  trained_on=$(sql "SELECT owner FROM jobs WHERE name = 'rr-0'")
  served_by=r1
  [[ "${trained_on}" == r1 ]] && served_by=r2
  # Loaded ahead of its first Predict there: the registration's notice made the other replica
  # fetch the archive from S3 and load it.
  rr0_archive=$(sql "SELECT path FROM models WHERE name = 'rr-0'")
  for _ in $(seq 100); do [[ -f "$(data_of "${served_by}")/${rr0_archive}" ]] && break; sleep 0.1; done
  [[ -f "$(data_of "${served_by}")/${rr0_archive}" ]] || fail "${served_by} did not load rr-0 ahead of its first Predict"
  grep -q 'model "rr-0" version 1 loaded ahead of its first Predict' "${work}/${served_by}.log" ||
    fail "${served_by}'s log does not say it loaded rr-0 ahead"
  echo "  ${served_by} loaded rr-0 ahead of its first Predict: $(grep -ho 'model "rr-0" version 1 loaded ahead[^)]*)' "${work}/${served_by}.log" | head -1)"
  printf '0.5,-1\n3,2.5\n-1,0.25\n' > "${work}/x.csv"
  cli "${trained_on}" -- --json predict rr-0 --input "${work}/x.csv" > "${work}/pred-trainer.json" || fail "predict on ${trained_on}"
  cli "${served_by}" -- --json predict rr-0 --input "${work}/x.csv" > "${work}/pred-other.json" || fail "predict on ${served_by}"
  cmp -s "${work}/pred-trainer.json" "${work}/pred-other.json" ||
    fail "outputs differ between ${trained_on} and ${served_by}: $(cat "${work}/pred-trainer.json" "${work}/pred-other.json")"
  cli "${served_by}" -- export rr-0 --format native -o "${work}/rr-0.anvil" > "${work}/export.txt" || fail "export from ${served_by}"
  archive=$(sql "SELECT path FROM models WHERE name = 'rr-0'")
  written="$(data_of "${trained_on}")/${archive}"
  cmp -s "${work}/rr-0.anvil" "${written}" || fail "the export differs from the archive the trainer wrote"
  grep -q "$(sha256sum "${written}" | cut -c1-64)" "${work}/export.txt" || fail "export hash"
  [[ -f "$(data_of "${served_by}")/${archive}" ]] || fail "${served_by} did not load the archive from S3"
  echo "  rr-0 trained on ${trained_on}, served by ${served_by} (its copy from S3) with identical outputs;" \
    "exported bytes = the trainer's archive, SHA-256 $(sha256sum "${written}" | cut -c1-12)…"

  echo "2. kill -9 of a replica running 2 jobs: both finish on the others"
  kill "${pid[r2]}" "${pid[r3]}"
  wait "${pid[r2]}" "${pid[r3]}" 2> /dev/null || true
  kill "${pid[r1]}"
  wait "${pid[r1]}" 2> /dev/null || true
  start_replica r1 "" --cpu-workers 2
  spec long-a 100 > "${work}/long-a.json"
  spec long-b 100 > "${work}/long-b.json"
  a=$(cli r1 -- --json submit "${work}/long-a.json" | job_id)
  b=$(cli r1 -- --json submit "${work}/long-b.json" | job_id)
  wait_sql "SELECT count(*) FROM jobs WHERE id IN ('${a}', '${b}') AND owner = 'r1' AND state = 'RUNNING' AND step >= 60" 2 60 \
    "both long jobs running on r1 past step 60"
  start_replica r2
  start_replica r3
  cli r3 -- --json watch "${a}" > "${work}/a-live.jsonl" 2> "${work}/a-live.err" &
  watcher=$!
  sleep 1
  kill -9 "${pid[r1]}"
  wait "${pid[r1]}" 2> /dev/null || true
  echo "  r1 killed at steps $(sql "SELECT string_agg(step::text, ', ') FROM jobs WHERE id IN ('${a}', '${b}')")"
  wait_sql "SELECT count(*) FROM jobs WHERE id IN ('${a}', '${b}') AND state = 'SUCCEEDED'" 2 240 "the long jobs after the kill"
  [[ $(sql "SELECT count(*) FROM jobs WHERE id IN ('${a}', '${b}') AND owner IN ('r2', 'r3')") == 2 ]] ||
    fail "the long jobs did not finish on r2/r3: $(sql "SELECT id, owner FROM jobs WHERE id IN ('${a}', '${b}')")"
  echo "  claims: $(sql "SELECT string_agg(job_id || '@' || owner || '#' || epoch, ' ' ORDER BY n) FROM claims WHERE job_id IN ('${a}', '${b}')")"
  for j in "${a}" "${b}"; do
    key=$(sql "SELECT checkpoint FROM jobs WHERE id = '${j}'")
    [[ "${key}" == jobs/${j}/checkpoints/e* ]] || fail "job ${j}'s row names no published checkpoint: '${key}'"
  done
  grep -h "from step" "${work}"/r2.log "${work}"/r3.log | grep -E "${a}|${b}" | sed 's/^.*INFO  /  /' | head -2
  wait "${watcher}" || fail "the live stream on r3 ended badly: $(cat "${work}/a-live.err")"
  python3 - "${work}/a-live.jsonl" <<'PY' || fail "the live stream across the failover"
import json, sys
events = list(map(json.loads, open(sys.argv[1])))
seqs = [int(e["seq"]) for e in events]
assert seqs == sorted(set(seqs)), "out of order or repeated"
assert events[-1].get("state") == "SUCCEEDED", events[-1]
print(f"  live stream on r3: {len(events)} events through the failover, in order, ending SUCCEEDED")
PY
  cli r2 -- --json watch "${a}" > "${work}/a.jsonl"
  python3 - "${work}/a.jsonl" <<'PY' || fail "the taken-over job's history has gaps or duplicates"
import json, sys
events = list(map(json.loads, open(sys.argv[1])))
steps = [int(e.get("step", 0)) for e in events if "step_metrics" in e]
assert steps == list(range(5, 5 * len(steps) + 1, 5)), steps[:40]
said = [e.get("message", "") for e in events]
assert any("its lease on replica r1 lapsed" in m for m in said), said
print(f"  history: {len(steps)} step events, each once; requeued: lease on r1 lapsed")
PY
  sed 's/"long-a"/"straight-a"/' "${work}/long-a.json" > "${work}/straight-a.json"
  sed 's/"long-b"/"straight-b"/' "${work}/long-b.json" > "${work}/straight-b.json"
  cli r2 -- submit "${work}/straight-a.json" --watch > /dev/null || fail "the uninterrupted run a"
  cli r3 -- submit "${work}/straight-b.json" --watch > /dev/null || fail "the uninterrupted run b"
  for n in long-a straight-a long-b straight-b; do
    cli r3 -- export "${n}" --format safetensors -o "${work}/${n}.safetensors" > /dev/null || fail "export ${n}"
  done
  same_weights "${work}/long-a.safetensors" "${work}/straight-a.safetensors"
  same_weights "${work}/long-b.safetensors" "${work}/straight-b.safetensors"

  echo "3. CancelJob on a replica that does not run the job"
  spec cancel-me 400 > "${work}/cancel.json"
  c=$(cli r2 -- --json submit "${work}/cancel.json" | job_id)
  wait_sql "SELECT count(*) FROM jobs WHERE id = '${c}' AND state = 'RUNNING' AND step > 0" 1 60 "the job to cancel running"
  owner=$(sql "SELECT owner FROM jobs WHERE id = '${c}'")
  other=r2
  [[ "${owner}" == r2 ]] && other=r3
  cli "${other}" -- cancel "${c}" > /dev/null || fail "cancel ${c} through ${other}"
  wait_sql "SELECT state FROM jobs WHERE id = '${c}'" CANCELLED 15 "the job cancelled through ${other}"
  echo "  running on ${owner}, cancelled through ${other}: $(sql "SELECT reason FROM jobs WHERE id = '${c}'")"

  echo "4. Predict over all three replicas, one killed and one drained mid-load"
  start_replica r1
  all="127.0.0.1:${port[r1]},127.0.0.1:${port[r2]},127.0.0.1:${port[r3]}"
  (
    failed=0
    for i in $(seq 120); do
      "${build}/client/anvil" --server "${all}" predict rr-0 --input "${work}/x.csv" > /dev/null 2>> "${work}/load.err" ||
        failed=$((failed + 1))
    done
    echo "${failed}" > "${work}/load.failed"
  ) &
  loader=$!
  sleep 1
  kill -9 "${pid[r2]}"
  sleep 1
  kill -TERM "${pid[r3]}"
  wait "${loader}"
  [[ $(cat "${work}/load.failed") == 0 ]] || fail "$(cat "${work}/load.failed") of 120 Predicts failed: $(sort -u "${work}/load.err" | head -3)"
  echo "  120 Predicts through --server r1,r2,r3 while r2 was killed and r3 drained: 0 failed"
  ;;

partition)
  [[ $(id -u) -eq 0 ]] || { echo "SKIP: network namespaces need root"; exit 77; }
  command -v ip > /dev/null || { echo "SKIP: no ip (iproute2)"; exit 77; }
  tag="p$$"
  hub="${tag}hub"
  cleanup_netns() {
    for ns in "${hub}" "${tag}db" "${tag}r1" "${tag}r2"; do ip netns del "${ns}" 2> /dev/null || true; done
  }
  trap 'cleanup; cleanup_netns' EXIT
  ip netns add "${hub}" || { echo "SKIP: cannot create network namespaces here"; exit 77; }
  ip -n "${hub}" link add br0 type bridge
  ip -n "${hub}" link set br0 up
  n=1
  for h in db r1 r2; do
    ns="${tag}${h}"
    ip netns add "${ns}"
    ip link add "${tag}v${h}" type veth peer name eth0 netns "${ns}"
    ip link set "${tag}v${h}" netns "${hub}"
    ip -n "${hub}" link set "${tag}v${h}" master br0 up
    ip -n "${ns}" addr add "10.79.0.${n}/24" dev eth0
    ip -n "${ns}" link set eth0 up
    ip -n "${ns}" link set lo up
    n=$((n + 1))
  done
  ANVIL_PG_LISTEN=10.79.0.1 ANVIL_PG_TRUST=10.79.0.0/24 start_postgres "${tag}db"
  # The artifacts in a folder both replicas mount (--artifacts DIR), each replica's data dir
  # its own: the shared-filesystem setup.
  shared_artifacts="${work}/shared-artifacts"
  sql() { ip netns exec "${tag}db" "${psql_bin}" "${url}" -XAtq -c "$1"; }
  start_replica r1 "${tag}r1"
  spec cut 200 > "${work}/cut.json"
  id=$(cli r1 "${tag}r1" -- --json submit "${work}/cut.json" | job_id)
  wait_sql "SELECT count(*) FROM jobs WHERE id = '${id}' AND owner = 'r1' AND step >= 100" 1 60 "the job running on r1"
  start_replica r2 "${tag}r2"
  echo "1. r1's link goes down mid-run"
  ip -n "${hub}" link set "${tag}vr1" down
  wait_sql "SELECT owner || ':' || state FROM jobs WHERE id = '${id}'" "r2:RUNNING" 60 "the job taken over by r2"
  grep -q "stopped on this replica (r1): its lease could not be renewed" "${work}/r1.log" ||
    fail "r1 did not stop the run itself: $(grep -v INFO "${work}/r1.log" | tail -5)"
  echo "  r2 runs it: $(sql "SELECT string_agg(owner || '#' || epoch, ' ' ORDER BY n) FROM claims WHERE job_id = '${id}'")"
  echo "2. the link returns: r1's late write is refused by the fencing epoch"
  ip -n "${hub}" link set "${tag}vr1" up
  for _ in $(seq 300); do grep -q "was refused: another replica has taken the job over" "${work}/r1.log" && break; sleep 0.1; done
  grep -q "was refused: another replica has taken the job over" "${work}/r1.log" ||
    fail "no refused write in r1's log: $(grep -v INFO "${work}/r1.log" | tail -8)"
  grep "was refused" "${work}/r1.log" | head -1 | sed 's/^/  r1: /'
  mport=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "${work}/r1.log")
  fenced=$(ip netns exec "${tag}r1" curl -sf "http://127.0.0.1:${mport}/metrics" |
    sed -n 's/^anvil_store_fenced_writes_total \(.*\)/\1/p')
  [[ -n "${fenced}" && "${fenced%.*}" -ge 1 ]] || fail "anvil_store_fenced_writes_total on r1: '${fenced}'"
  echo "  anvil_store_fenced_writes_total on r1: ${fenced}"
  wait_sql "SELECT owner || ':' || state FROM jobs WHERE id = '${id}'" "r2:SUCCEEDED" 240 "the job finished on r2"
  [[ $(sql "SELECT count(*) FROM claims WHERE job_id = '${id}'") == 2 ]] ||
    fail "claims: $(sql "SELECT owner, epoch FROM claims WHERE job_id = '${id}'")"
  # The row names a checkpoint of r2's lease epoch: whatever r1 published under its own is
  # never what the job resumes from.
  epoch2=$(sql "SELECT epoch FROM claims WHERE job_id = '${id}' AND owner = 'r2'")
  key=$(sql "SELECT checkpoint FROM jobs WHERE id = '${id}'")
  [[ "${key}" == "jobs/${id}/checkpoints/e${epoch2}-"* ]] || fail "the row names ${key}, not a checkpoint of epoch ${epoch2}"
  grep -h "from step" "${work}/r2.log" | sed 's/^.*INFO  /  r2: /' | head -1
  echo "  the row names ${key##*/} (r2's epoch ${epoch2})"
  ;;
span)
  shared_artifacts="${work}/shared-artifacts"
  start_postgres
  for r in r1 r2 r3; do start_replica "${r}" "" --rank-slots 1; done
  echo "1. a job of 2 ranks on replicas of 1 rank slot each"
  spec dp 150 | python3 -c "
import json, sys
s = json.load(sys.stdin); s.update(world_size=2, max_restarts=3); s['checkpoint']['every_steps'] = 20
print(json.dumps(s))" > "${work}/dp.json"
  d=$(cli r1 -- --json submit "${work}/dp.json" | job_id)
  wait_sql "SELECT count(*) FROM job_parts WHERE job_id = '${d}' AND node = 1 AND state = 'running'" 1 60 \
    "node 1 claimed by a replica"
  coord=$(sql "SELECT owner FROM jobs WHERE id = '${d}'")
  node1=$(sql "SELECT owner FROM job_parts WHERE job_id = '${d}' AND node = 1")
  [[ -n "${coord}" && "${coord}" != "${node1}" ]] || fail "node 0 on '${coord}', node 1 on '${node1}'"
  echo "  node 0 on ${coord}, node 1 on ${node1}"
  wait_sql "SELECT count(*) FROM jobs WHERE id = '${d}' AND step >= 100 AND checkpoint LIKE 'jobs/%'" 1 120 \
    "the job past step 100 with a published checkpoint"
  echo "2. kill -9 of node 1's replica (${node1})"
  kill -9 "${pid[${node1}]}"
  wait "${pid[${node1}]}" 2> /dev/null || true
  echo "  killed at step $(sql "SELECT step FROM jobs WHERE id = '${d}'")"
  wait_sql "SELECT count(*) FROM job_parts WHERE job_id = '${d}' AND attempt >= 1 AND state = 'running' AND owner <> '${node1}'" \
    1 60 "node 1 of a new attempt taken by the replica left"
  echo "  node 1 now: $(sql "SELECT owner || ', attempt ' || attempt || ', from ' || checkpoint FROM job_parts WHERE job_id = '${d}'")"
  echo "3. node 1's replica frozen (SIGSTOP, its ranks too): its lease on node 1 lapses"
  frozen=$(sql "SELECT owner FROM job_parts WHERE job_id = '${d}'")
  start_replica "${node1}" "" --rank-slots 1
  frozen_pids="${pid[${frozen}]} $(pgrep -P "${pid[${frozen}]}" | tr '\n' ' ')"
  kill -STOP ${frozen_pids}
  wait_sql "SELECT count(*) FROM job_parts WHERE job_id = '${d}' AND attempt >= 2 AND state = 'running' AND owner = '${node1}'" \
    1 60 "node 1 of attempt 2 on the restarted ${node1}"
  grep -q "node 1's replica ${frozen} stopped renewing its lease; restarting the ranks" "${work}/${coord}.log" ||
    fail "${coord} did not end the attempt for the lapsed lease: $(grep -v INFO "${work}/${coord}.log" | tail -5)"
  grep -h "stopped renewing its lease" "${work}/${coord}.log" | sed 's/^.*  job /  job /' | head -1
  kill -CONT ${frozen_pids}
  for _ in $(seq 100); do grep -q "stopped on this replica (${frozen})" "${work}/${frozen}.log" && break; sleep 0.1; done
  grep -q "stopped on this replica (${frozen}): its job moved on" "${work}/${frozen}.log" ||
    fail "${frozen} did not stop its stale node 1: $(grep -v INFO "${work}/${frozen}.log" | tail -5)"
  echo "  ${frozen}, thawed: $(grep -ho "stopped on this replica (${frozen}): its job moved on[^;]*" "${work}/${frozen}.log" | head -1)"
  wait_sql "SELECT state FROM jobs WHERE id = '${d}'" SUCCEEDED 300 "the job after the kill"
  [[ $(sql "SELECT count(*) FROM claims WHERE job_id = '${d}'") == 1 ]] ||
    fail "the job was claimed again: $(sql "SELECT owner, epoch FROM claims WHERE job_id = '${d}'")"
  [[ $(sql "SELECT owner FROM jobs WHERE id = '${d}'") == "${coord}" ]] || fail "node 0 moved"
  grep -q "attempt 0: node 1's replica ${node1} stopped renewing its lease\|attempt 0: .*restarting" "${work}/${coord}.log" ||
    grep -q "restarting all ranks from the last checkpoint" "${work}/${coord}.log" ||
    fail "${coord} did not restart the attempt: $(grep -v INFO "${work}/${coord}.log" | tail -5)"
  grep -h "restarting" "${work}/${coord}.log" | sed 's/^.*  job /  job /' | head -2
  [[ $(sql "SELECT count(*) FROM job_parts WHERE job_id = '${d}'") == 0 ]] || fail "the job's parts outlived it"
  cli "${coord}" -- --json watch "${d}" > "${work}/dp.jsonl"
  python3 - "${work}/dp.jsonl" <<'PY' || fail "the spread job's history has gaps or duplicates"
import json, sys
events = list(map(json.loads, open(sys.argv[1])))
steps = [int(e.get("step", 0)) for e in events if "step_metrics" in e]
assert steps == list(range(5, 5 * len(steps) + 1, 5)), steps[:60]
restarts = [e["message"] for e in events if "restart 1" in e.get("message", "")]
assert restarts, [e.get("message") for e in events if e.get("message")]
print(f"  history: {len(steps)} step events, each once; {restarts[0]}")
PY
  echo "4. a spread job cancelled through a replica that runs neither node"
  sed 's/"dp"/"dp-cancel"/' "${work}/dp.json" > "${work}/dp-cancel.json"
  c=$(cli "${coord}" -- --json submit "${work}/dp-cancel.json" | job_id)
  wait_sql "SELECT count(*) FROM job_parts WHERE job_id = '${c}' AND state = 'running'" 1 60 "node 1 of the job to cancel"
  wait_sql "SELECT count(*) FROM jobs WHERE id = '${c}' AND step >= 20" 1 60 "the job to cancel training"
  c0=$(sql "SELECT owner FROM jobs WHERE id = '${c}'")
  c1=$(sql "SELECT owner FROM job_parts WHERE job_id = '${c}'")
  third=$(printf '%s\n' r1 r2 r3 | grep -vx "${c0}" | grep -vx "${c1}" | head -1)
  cli "${third}" -- cancel "${c}" > /dev/null || fail "cancel through ${third}"
  wait_sql "SELECT state FROM jobs WHERE id = '${c}'" CANCELLED 30 "the spread job cancelled"
  wait_sql "SELECT count(*) FROM job_parts WHERE job_id = '${c}'" 0 10 "the cancelled job's parts removed"
  for _ in $(seq 100); do grep -q "job ${c}: node 1 (attempt 0) finished" "${work}/${c1}.log" && break; sleep 0.1; done
  grep -q "job ${c}: node 1 (attempt 0) finished" "${work}/${c1}.log" ||
    fail "node 1 on ${c1} did not end with the job: $(grep "${c}" "${work}/${c1}.log" | tail -3)"
  echo "  nodes on ${c0} and ${c1}, cancelled through ${third}: both ended at the step they agreed on"
  echo "5. the same job with both ranks on one replica: the same weights"
  for r in r1 r2 r3; do
    kill "${pid[${r}]}" 2> /dev/null || true
    wait "${pid[${r}]}" 2> /dev/null || true
  done
  start_replica r4
  sed 's/"dp"/"dp-local"/' "${work}/dp.json" > "${work}/dp-local.json"
  cli r4 -- submit "${work}/dp-local.json" --watch > /dev/null || fail "the single-replica run"
  for n in dp dp-local; do
    cli r4 -- export "${n}" --format safetensors -o "${work}/${n}.safetensors" > /dev/null || fail "export ${n}"
  done
  same_weights "${work}/dp.safetensors" "${work}/dp-local.safetensors"
  echo "  the spread job (its attempt restarted twice) and the single-replica run: bitwise equal weights"
  ;;
*)
  fail "unknown mode ${mode}"
  ;;
esac
echo PASS
