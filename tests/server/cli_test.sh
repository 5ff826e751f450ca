#!/usr/bin/env bash
# The CLI as a user meets it, against a real anvild (ctest label "system"): the exit-code table
# (client/exit_codes.h) row by row, error lines that end in the code's name, readable output
# by default and JSON with --json, empty listings that say so, `jobs --state` in any case,
# `--top-k 0` refused, a missing input file's reason, `predict --label-column` (the column left
# out of the input, the accuracy reported), and `export --format onnx --verify`.
#   cli_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" cli
start_anvild
anvil=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")

expect_exit() {  # expect_exit CODE DESCRIPTION COMMAND... : runs it, output in ${work}/out
  local want=$1 what=$2
  shift 2
  set +e
  "$@" > "${work}/out" 2>&1
  local got=$?
  set -e
  [[ ${got} -eq ${want} ]] || fail "${what}: exit ${got}, expected ${want}; output: $(cat "${work}/out")"
}
expect_output() {  # expect_output REGEX DESCRIPTION
  grep -qE -- "$1" "${work}/out" || fail "$2: no match for '$1' in: $(cat "${work}/out")"
}

echo "1. empty listings say so; --state takes any case"
expect_exit 0 "jobs" "${anvil[@]}" jobs
expect_output "^no jobs$" "an empty job list"
expect_exit 0 "models" "${anvil[@]}" models
expect_output "^no models$" "an empty model list"
expect_exit 0 "jobs --state running" "${anvil[@]}" jobs --state running
expect_output "^no running jobs$" "a filtered empty job list"
expect_exit 2 "jobs --limit 0" "${anvil[@]}" jobs --limit 0
expect_output "limit" "a limit below 1 names the option"
expect_exit 2 "jobs --state bogus" "${anvil[@]}" jobs --state bogus
expect_output "expected QUEUED, RUNNING, .* got \"bogus\"" "an unknown state"

echo "2. a job: readable summary, JSON with --json"
cat > "${work}/quick.json" <<JSON
{"name": "quick", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 2, "batch_size": 32, "seed": 11}
JSON
expect_exit 0 "submit --watch" "${anvil[@]}" submit "${work}/quick.json" --watch
id=$("${anvil[@]}" --json jobs | python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['id'])")
expect_exit 0 "job" "${anvil[@]}" job "${id}"
expect_output "^${id}  quick$" "job summary header"
expect_output "^  state: +SUCCEEDED" "job summary state"
expect_output "^  progress: +step [0-9]+, epoch 2 of 2$" "job summary progress"
expect_output "^  model: +quick:1$" "job summary model"
expect_exit 0 "--json job" "${anvil[@]}" --json job "${id}"
python3 -c "import json,sys; j = json.load(open(sys.argv[1])); assert j['state'] == 'SUCCEEDED', j" "${work}/out" ||
  fail "--json job is not the job as JSON: $(cat "${work}/out")"
expect_exit 0 "model" "${anvil[@]}" model quick
expect_output "^quick:1  from job ${id}, [0-9]+ parameters" "model summary"
expect_output "^  input " "model summary inputs"
expect_exit 0 "--json model" "${anvil[@]}" --json model quick
python3 -c "import json,sys; m = json.load(open(sys.argv[1])); assert m['name'] == 'quick', m" "${work}/out" ||
  fail "--json model is not the model as JSON"

echo "3. the exit-code table, row by row, each error line ending in the code's name"
printf '0.5,-1\n3,2.5\n-2,1\n1,1\n' > "${work}/x.csv"
expect_exit 4 "predict on an unknown model" "${anvil[@]}" predict nope --input "${work}/x.csv"
expect_output "\(NOT_FOUND\)$" "a NOT_FOUND line"
printf '{"name": "bad", "model_preset": "no-such-preset", "dataset": {"name": "blobs"}}\n' > "${work}/bad.json"
expect_exit 2 "submit an invalid spec" "${anvil[@]}" submit "${work}/bad.json"
expect_output "\(INVALID_ARGUMENT\)$" "an INVALID_ARGUMENT line"
expect_exit 7 "cancel a job that ended" "${anvil[@]}" cancel "${id}"
expect_output "\(FAILED_PRECONDITION\)$" "a FAILED_PRECONDITION line"
expect_exit 2 "predict --top-k 0" "${anvil[@]}" predict quick --input "${work}/x.csv" --top-k 0
expect_output "top-k" "the --top-k refusal names the flag"
expect_exit 2 "predict with a missing input" "${anvil[@]}" predict quick --input "${work}/missing.csv"
expect_output "cannot read \".*missing.csv\": No such file or directory" "the system's reason"
cat > "${work}/slow.json" <<JSON
{"name": "slow", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 100000, "batch_size": 8}
JSON
slow=$("${anvil[@]}" --json submit "${work}/slow.json" | python3 -c "import json,sys; print(json.load(sys.stdin)['job']['id'])")
expect_exit 0 "cancel" "${anvil[@]}" cancel "${slow}"
expect_exit 3 "watch a cancelled job" "${anvil[@]}" watch "${slow}"
# delete: a finished job goes with its history; --limit reads only the newest.
expect_exit 0 "jobs --limit 1" "${anvil[@]}" --json jobs --limit 1
[[ $(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['jobs']))" "${work}/out") == 1 ]] ||
  fail "jobs --limit 1: expected one job, got: $(cat "${work}/out")"
expect_exit 0 "delete a cancelled job" "${anvil[@]}" delete "${slow}"
expect_output "^deleted ${slow}$" "the deletion said"
expect_exit 4 "the deleted job is gone" "${anvil[@]}" job "${slow}"
expect_exit 4 "delete it again" "${anvil[@]}" delete "${slow}"
expect_exit 5 "a server that is not there" "${build}/client/anvil" --server 127.0.0.1:1 jobs
expect_output "\((UNAVAILABLE|DEADLINE_EXCEEDED)\)$" "an UNAVAILABLE line"
expect_exit 0 "--help" "${anvil[@]}" --help
expect_output "^  7  refused \(PERMISSION_DENIED" "the table in --help"

echo "4. predict --label-column: the column left out, the accuracy reported"
expect_exit 0 "--json predict" "${anvil[@]}" --json predict quick --input "${work}/x.csv" --top-k 1
# The truth for the check: the model's own top class for rows 0-2 and another class for row 3.
python3 - "${work}/out" "${work}/labelled.csv" <<'PY'
import json, sys
pred = [int(k["classes"][0]) for k in json.load(open(sys.argv[1]))["top_k"]]
rows = ["0.5,-1", "3,2.5", "-2,1", "1,1"]
labels = pred[:3] + [pred[3] + 1]
with open(sys.argv[2], "w") as f:
    f.write("x0,class,x1\n")
    for r, l in zip(rows, labels):
        a, b = r.split(",")
        f.write(f"{a},{l},{b}\n")
PY
expect_exit 0 "predict --label-column class" "${anvil[@]}" predict quick --input "${work}/labelled.csv" --label-column class
expect_output "^accuracy: 75.0% \(3 of 4\)$" "the accuracy by header name"
[[ $(grep -c "(wrong)" "${work}/out") -eq 1 ]] || fail "one sample should be marked wrong: $(cat "${work}/out")"
expect_exit 0 "predict --label-column 1" "${anvil[@]}" predict quick --input "${work}/labelled.csv" --label-column 1
expect_output "^accuracy: 75.0% \(3 of 4\)$" "the accuracy by index"
expect_exit 2 "predict without --label-column" "${anvil[@]}" predict quick --input "${work}/labelled.csv"
expect_output "a label column\? name it with --label-column" "the hint for an extra column"
expect_exit 2 "--label-column that is not there" "${anvil[@]}" predict quick --input "${work}/labelled.csv" \
  --label-column nope
expect_output "not in the header row" "an unknown label column"
echo "5. export --format onnx: written, verified by the server, options checked"
expect_exit 0 "export onnx --verify" "${anvil[@]}" export quick --format onnx --opset 13 --verify --fold-batch-norm \
  -o "${work}/quick.onnx"
expect_output "^wrote .*quick.onnx \([0-9]+ bytes, sha256 [0-9a-f]{64}\)$" "the export line"
expect_output "^verified in OpenCV DNN [0-9.]+: max \|error\| .* at batch 1, .* at batch 7$" "the verification line"
[[ -s "${work}/quick.onnx" && ! -e "${work}/quick.onnx.part" ]] || fail "export left no file, or a .part"
expect_exit 2 "--verify on a native export" "${anvil[@]}" export quick --format native --verify -o "${work}/q.anvil"
expect_output "apply to --format onnx only" "the --verify refusal"
expect_exit 2 "--opset 19" "${anvil[@]}" export quick --format onnx --opset 19 -o "${work}/q.onnx"
expect_exit 2 "a dynamic axis that is not a dim" "${anvil[@]}" export quick --format onnx --dynamic-axis input:4=seq \
  -o "${work}/q.onnx"
expect_output "dim 4 is not a non-batch dim of input 'input'.*\(INVALID_ARGUMENT\)$" "the dynamic-axis refusal"
[[ ! -e "${work}/q.onnx" ]] || fail "a refused export left a file"

echo "6. models add: an ONNX file registered, listed as imported, predicting like its source"
expect_exit 0 "models add" "${anvil[@]}" models add outside "${work}/quick.onnx" --label a --label b --label c --label d
expect_output "^outside:1  imported, [1-9][0-9]* parameters" "the registered model's summary (its initializers counted)"
expect_exit 0 "models after models add" "${anvil[@]}" models
expect_output "^outside:1  imported  fp32  [1-9][0-9]* parameters$" "the imported model in the listing"
expect_output "^quick:1  job ${id}  fp32  [0-9]+ parameters$" "the trained model in the listing"
expect_exit 0 "predict on the imported model" "${anvil[@]}" --json predict outside --input "${work}/x.csv" --top-k 1
python3 -c "import json,sys; r = json.load(open(sys.argv[1])); assert r['top_k'][0]['labels'][0] in 'abcd', r" \
  "${work}/out" || fail "the imported model's prediction carries no label: $(cat "${work}/out")"
printf 'not an onnx file' > "${work}/junk.onnx"
expect_exit 2 "models add of a file that is not ONNX" "${anvil[@]}" models add junk "${work}/junk.onnx"
expect_output "not an ONNX model.*nothing was registered.*\(INVALID_ARGUMENT\)$" "the import refusal"
expect_exit 2 "models add of a missing file" "${anvil[@]}" models add junk "${work}/missing.onnx"
expect_output "cannot read" "the missing file's reason"
echo "7. mixed precision: a bf16 job served in bf16, its precision and accuracies in the summaries; an fp16 job's loss scale"
cat > "${work}/half.json" <<JSON
{"name": "half", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 2, "batch_size": 32, "seed": 11,
 "precision": "bf16", "serving_precision": "bf16"}
JSON
expect_exit 0 "submit a bf16 job" "${anvil[@]}" submit "${work}/half.json" --watch
hid=$("${anvil[@]}" --json jobs | python3 -c "
import json,sys
print([j['id'] for j in json.load(sys.stdin)['jobs'] if j['name'] == 'half'][0])")
expect_exit 0 "job half" "${anvil[@]}" job "${hid}"
expect_output "^  precision: bf16 \(serving bf16\)$" "the job's precision line"
expect_exit 0 "model half" "${anvil[@]}" model half
expect_output "^  serves in: bf16  \(validation accuracy: fp32 [0-9.]+ %, bf16 [0-9.]+ %\)$" "the model's precision line"
cat > "${work}/f16.json" <<JSON
{"name": "f16", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 2, "batch_size": 32, "seed": 11,
 "precision": "fp16"}
JSON
expect_exit 0 "submit an fp16 job" "${anvil[@]}" submit "${work}/f16.json" --watch
expect_output "^epoch 2 .*loss [0-9.]+.*  scale [0-9.e+]+, [0-9]+ skipped" "the loss scale in the progress line"
printf '{"name": "bad", "model_preset": "mlp", "dataset": {"name": "blobs"}, "precision": "fp8"}' > "${work}/bad.json"
expect_exit 2 "a precision the service does not know" "${anvil[@]}" submit "${work}/bad.json"
expect_output "spec.precision: expected \"fp32\", \"bf16\" or \"fp16\".*\(INVALID_ARGUMENT\)$" "the precision refusal"
echo "8. quantize: the int8 version, its layers' errors, --keep-float, refusals by exit code"
expect_exit 0 "quantize quick dynamically" "${anvil[@]}" quantize quick:1 --mode dynamic --max-accuracy-drop 100
expect_output "^int8 \(dynamic\) accuracy [0-9.]+% against float32 [0-9.]+%" "the gate's line"
expect_output "^  layer [0-9.]+ +DynamicQuantizedLinear +SQNR +[0-9.-]+ dB$" "a layer's error"
layer=$(grep -m1 -oE "^  layer [0-9.]+" "${work}/out" | awk '{print $2}')
expect_exit 0 "quantize keeping a layer in float" "${anvil[@]}" --json quantize quick:1 --mode dynamic \
  --max-accuracy-drop 100 --keep-float "${layer}" --per-tensor-weights
python3 - "${work}/out" "${layer}" <<'PY' || fail "--keep-float: $(cat "${work}/out")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["registered"], r
assert all(l["layer"] != sys.argv[2] for l in r.get("layers", [])), r["layers"]
assert "kept in float: " + sys.argv[2] in r["model"]["quantization"], r["model"]["quantization"]
assert "per-tensor weights" in r["model"]["quantization"], r["model"]["quantization"]
PY
expect_exit 2 "a layer the model does not have" "${anvil[@]}" quantize quick:1 --keep-float 99
expect_output "keep_float: \"99\" is not one of the model's .*\(INVALID_ARGUMENT\)$" "the unknown layer's refusal"
expect_exit 7 "an int8 version quantized again" "${anvil[@]}" quantize quick --mode dynamic
expect_output "is already int8 \(FAILED_PRECONDITION\)$" "the int8 version's refusal"
echo "ok: cli"
