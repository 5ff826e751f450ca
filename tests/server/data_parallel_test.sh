#!/usr/bin/env bash
# A data-parallel job through anvild (JobSpec.world_size): two CPU rank processes under the
# CPU worker, Gloo over loopback.
#   1. a digits job with world_size 2 succeeds, registers a servable model, and its metrics show
#      both ranks (Prometheus and the job's metric stream)
#   2. kill -9 of one rank process restarts the job's ranks from the checkpoint, the job
#      succeeds, and anvild answers Predict all the while
#   3. a spec that cannot split its batch is refused at submit, naming the fields
#   4. a rank that computes 20 ms longer per step (fault point distributed:slow:rank1) is named
#      by the doctor (STRAGGLER_RANK, rank 1); the healthy job of 1 lists the rule as healthy
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" data-parallel
source_dir=$2
export ANVIL_LOG_LEVEL=info
: > "${work}/anvild.log"
"${build}/server/anvild" --address 127.0.0.1:0 --metrics-address 127.0.0.1:0 --data-dir "${work}/data" \
  --datasets-dir "${source_dir}/data" > "${work}/anvild.log" 2>&1 &
anvild_pid=$!
pids+=("${anvild_pid}")
for _ in $(seq 100); do
  grpc_port=$(port_in_log "listening on 127.0.0.1:")
  metrics_port=$(port_in_log "metrics on http:\\/\\/127.0.0.1:")
  [[ -n "${grpc_port}" && -n "${metrics_port}" ]] && break
  sleep 0.1
done
[[ -n "${grpc_port}" ]] || fail "anvild did not start"
cli=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")

spec() {  # spec NAME EPOCHS
  cat <<JSON
{"name": "$1", "model_preset": "mlp", "dataset": {"name": "digits"}, "epochs": $2, "batch_size": 64,
 "world_size": 2, "seed": 3, "metric_interval": 5, "checkpoint": {"every_steps": 10}}
JSON
}

echo "1. world_size 2: succeeds, serves, both ranks in the metrics"
spec dp 3 > "${work}/dp.json"
"${cli[@]}" submit "${work}/dp.json" --watch > "${work}/watch.txt" || fail "the data-parallel job: $(tail -3 "${work}/watch.txt")"
grep -q SUCCEEDED "${work}/watch.txt" || fail "no SUCCEEDED"
id=$("${cli[@]}" --json jobs | python3 -c "import json,sys; print([j['id'] for j in json.load(sys.stdin)['jobs'] if j['name']=='dp'][0])")
[[ $(job_field "${id}" device) == "cpu" ]] || fail "device: $(job_field "${id}" device)"
python3 -c "print(','.join(['0.5']*64))" > "${work}/x.csv"
"${cli[@]}" predict dp --input "${work}/x.csv" > "${work}/pred.txt" || fail "predict on the data-parallel model"
grep -q "^sample" "${work}/pred.txt" || fail "predict printed $(cat "${work}/pred.txt")"
curl -sf "http://127.0.0.1:${metrics_port}/metrics" > "${work}/metrics.txt"
for r in 0 1; do
  grep -q "^anvil_train_rank_step_seconds{job=\"${id}\",name=\"dp\",rank=\"${r}\"}" "${work}/metrics.txt" ||
    fail "no anvil_train_rank_step_seconds for rank ${r}"
done
"${cli[@]}" --json watch "${id}" > "${work}/events.jsonl"
python3 - "${work}/events.jsonl" <<'PY' || fail "the metric stream does not show both ranks"
import json, sys
steps = [e["step_metrics"] for e in map(json.loads, open(sys.argv[1])) if "step_metrics" in e]
assert steps and all(len(s.get("rank_step_seconds", [])) == 2 for s in steps), steps[:2]
print(f"  {len(steps)} step events, each with 2 ranks' step times, e.g. {steps[-1]['rank_step_seconds']}")
PY

echo "2. kill -9 of a rank: the job restarts from its checkpoint; Predict keeps answering"
spec dpkill 40 > "${work}/dpkill.json"
kid=$("${cli[@]}" --json submit "${work}/dpkill.json" | python3 -c "import json,sys; print(json.load(sys.stdin)['job']['id'])")
for _ in $(seq 600); do [[ $(job_field "${kid}" step) -ge 30 ]] && break; sleep 0.05; done
[[ $(job_field "${kid}" step) -ge 30 ]] || fail "the job did not reach step 30"
rank1=""
for p in $(pgrep -P "${anvild_pid}" -f -- '--rank-worker' || true); do
  tr '\0' '\n' < "/proc/${p}/environ" | grep -qx 'ANVIL_RANK=1' && rank1=$p
done
[[ -n "${rank1}" ]] || fail "no rank 1 process under anvild"
( ok=0; bad=0
  for _ in $(seq 60); do
    if "${cli[@]}" predict dp --input "${work}/x.csv" > /dev/null 2>&1; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
    sleep 0.05
  done
  echo "${ok} ${bad}" > "${work}/predicts" ) &
predictor=$!
kill -9 "${rank1}"
"${cli[@]}" watch "${kid}" > /dev/null || fail "the job did not succeed after the rank was killed"
wait "${predictor}"
read -r ok bad < "${work}/predicts"
[[ ${bad} -eq 0 && ${ok} -gt 0 ]] || fail "Predict failed ${bad} times while the ranks restarted"
grep -q "rank 1 (pid ${rank1}) was killed by signal 9 (SIGKILL); the other ranks were stopped; restarting" \
  "${work}/anvild.log" || fail "anvild's log does not name the killed rank"
grep -q "restart 1: resumed at step" "${work}/anvild.log" || fail "the ranks did not resume from the checkpoint"
kill -0 "${anvild_pid}" || fail "anvild died"
echo "  rank 1 killed; restarted; ${ok} Predicts answered meanwhile, none failed"
grep "restart 1: resumed" "${work}/anvild.log" | head -1

echo "3. a batch that does not split is refused at submit"
sed 's/"batch_size": 64/"batch_size": 63/' "${work}/dp.json" > "${work}/bad.json"
if "${cli[@]}" submit "${work}/bad.json" > "${work}/bad.txt" 2>&1; then
  fail "batch_size 63 with world_size 2 was accepted"
fi
grep -q "the global batch 63 must divide by world_size 2" "${work}/bad.txt" || fail "refusal: $(cat "${work}/bad.txt")"
sed 's/"world_size": 2,/"world_size": 2, "doctor": {"on_lr_too_high": "halve"},/' "${work}/dp.json" > "${work}/act.json"
if "${cli[@]}" submit "${work}/act.json" > "${work}/act.txt" 2>&1; then
  fail "a doctor action with world_size 2 was accepted"
fi
grep -q "doctor.on_lr_too_high: the doctor's actions are for single-process jobs" "${work}/act.txt" ||
  fail "refusal: $(cat "${work}/act.txt")"

echo "4. a straggling rank: the doctor names it; the healthy job checked it"
"${cli[@]}" --json doctor "${id}" > "${work}/doctor-dp.json" || fail "anvil doctor on the healthy job"
kill "${anvild_pid}"
wait "${anvild_pid}" 2> /dev/null || true
# The same data folder, with rank 1 of every data-parallel job made 20 ms slower per step.
: > "${work}/anvild.log"
ANVIL_FAULT_POINT=distributed:slow:rank1=fire "${build}/server/anvild" --address 127.0.0.1:0 \
  --metrics-address 127.0.0.1:0 --data-dir "${work}/data" --datasets-dir "${source_dir}/data" > "${work}/anvild.log" 2>&1 &
anvild_pid=$!
pids+=("${anvild_pid}")
wait_for_grpc_port
cli=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")
spec slow 3 > "${work}/slow.json"
"${cli[@]}" submit "${work}/slow.json" --watch > "${work}/watch-slow.txt" ||
  fail "the straggling job: $(tail -3 "${work}/watch-slow.txt")"
sid=$("${cli[@]}" --json jobs | python3 -c "import json,sys; print([j['id'] for j in json.load(sys.stdin)['jobs'] if j['name']=='slow'][0])")
"${cli[@]}" --json doctor "${sid}" > "${work}/doctor-slow.json" || fail "anvil doctor on the straggling job"
"${cli[@]}" doctor "${sid}" > "${work}/doctor-slow.txt"
python3 - "${work}/doctor-dp.json" "${work}/doctor-slow.json" <<'PY' || fail "the doctor did not name the straggler"
import json, sys
healthy, slow = (json.load(open(p)) for p in sys.argv[1:])
assert "STRAGGLER_RANK" in healthy.get("healthy", []), healthy
assert not any(f["code"] == "STRAGGLER_RANK" for f in healthy.get("findings", [])), healthy
found = [f for f in slow.get("findings", []) if f["code"] == "STRAGGLER_RANK"]
assert found, slow
evidence = {e["name"]: e.get("value", 0.0) for e in found[0]["evidence"]}  # proto JSON omits zeros
assert evidence.get("rank", 0) == 1 and evidence["slowdown"] > 1.5, evidence
print(f"  STRAGGLER_RANK: rank 1 at {evidence['compute_seconds'] * 1e3:.1f} ms/step of compute, the others' "
      f"median {evidence['others_median_seconds'] * 1e3:.1f} ms ({evidence['slowdown']:.1f}x)")
PY
grep -A2 "STRAGGLER_RANK" "${work}/doctor-slow.txt" | head -3
echo PASS
