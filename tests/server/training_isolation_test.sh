#!/usr/bin/env bash
# A training job's weights do not depend on what else the server does meanwhile. The same spec
# and seed (a CNN with dropout, which draws random numbers at every step) is trained alone, and
# again while an int8 version of another model is loaded for a Predict: loading it builds the
# model's float layers, drawing their initialisation. Each job draws from a generator of its
# own (core/tensor/random.h, ScopedDefaultGenerator), so the two are bitwise equal; when jobs
# shared the process-wide generator, 16 of the 18 tensors differed.
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" isolation
source_dir=$2

start() {
  : > "${work}/anvild.log"
  "${build}/server/anvild" --address 127.0.0.1:0 --metrics-address 127.0.0.1:0 --data-dir "${work}/data" \
    --datasets-dir "${source_dir}/data" > "${work}/anvild.log" 2>&1 &
  anvild_pid=$!
  pids+=("${anvild_pid}")
  wait_for_grpc_port
  cli=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")
}
stop() { kill "${anvild_pid}"; wait "${anvild_pid}" || true; }

spec() {  # spec NAME EPOCHS
  python3 - "$1" "$2" <<'PY'
import json, sys
model = {"input_shape": [1, 8, 8], "layers": [
    {"type": "conv2d", "out_channels": 16, "kernel_size": 3, "padding": "same"}, {"type": "relu"},
    {"type": "maxpool2d", "kernel_size": 2}, {"type": "flatten"},
    {"type": "linear", "out_features": 64}, {"type": "relu"}, {"type": "dropout", "p": 0.25},
    {"type": "linear", "out_features": 10}]}
print(json.dumps({"name": sys.argv[1], "model_json": json.dumps(model), "dataset": {"name": "digits"},
                  "epochs": int(sys.argv[2]), "batch_size": 64, "seed": 1, "metric_interval": 10}))
PY
}
job_id() { "${cli[@]}" --json jobs | python3 -c "import json,sys; print([j['id'] for j in json.load(sys.stdin)['jobs'] if j['name']=='$1'][0])"; }

echo "1. a model and its int8 version"
start
spec base 2 > "${work}/base.json"
"${cli[@]}" submit "${work}/base.json" --watch > /dev/null || fail "the base job"
"${cli[@]}" quantize base:1 > "${work}/quantize.txt" || fail "quantize: $(cat "${work}/quantize.txt")"
grep -q "^base:2 " "${work}/quantize.txt" || fail "no int8 version 2: $(cat "${work}/quantize.txt")"

echo "2. the job alone"
stop
start
spec alone 100 > "${work}/alone.json"
"${cli[@]}" submit "${work}/alone.json" --watch > /dev/null || fail "the job alone"
"${cli[@]}" export alone --format safetensors -o "${work}/alone.st" > /dev/null

echo "3. the same job while the int8 version is loaded for a Predict"
stop
start  # nothing loaded: the Predict loads the int8 version
spec beside 100 > "${work}/beside.json"
"${cli[@]}" submit "${work}/beside.json" > /dev/null
id=$(job_id beside)
wait_for_step "${id}" 40
python3 -c "print(','.join(['0.5'] * 64))" > "${work}/x.csv"  # one [1, 8, 8] image, flattened
"${cli[@]}" predict base:2 --input "${work}/x.csv" > "${work}/pred.txt" || fail "predict: $(cat "${work}/pred.txt")"
[[ $(job_field "${id}" state) == "RUNNING" ]] || fail "the job ended before the Predict: nothing was shown"
"${cli[@]}" watch "${id}" > /dev/null || true
[[ $(job_field "${id}" state) == "SUCCEEDED" ]] || fail "the job beside: $(job_field "${id}" state)"
"${cli[@]}" export beside --format safetensors -o "${work}/beside.st" > /dev/null
same_weights "${work}/alone.st" "${work}/beside.st"
echo "PASS"
