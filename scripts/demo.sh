#!/usr/bin/env bash
# The demo behind `make demo`: anvild on its embedded defaults (./anvil-data, the CPU worker),
# the digits CNN trained through the service, predictions on held-out digits, an export.
#   scripts/demo.sh [BUILD_DIR] [DATA_DIR]
set -euo pipefail

build="${1:-build}"
datasets="${2:-data}"
root="anvil-data"
port="${ANVIL_DEMO_PORT:-50051}"
anvil=("${build}/client/anvil" --server "127.0.0.1:${port}")

# Held-out digits the job never sees: the last 200 of the 1,797 rows go to a separate file.
mkdir -p "${root}/datasets" "${root}/exports"
python3 - "${datasets}/digits.csv.gz" "${root}/datasets" <<'PY'
import gzip, sys
src, out = sys.argv[1], sys.argv[2]
rows = [line.strip().split(",") for line in gzip.open(src, "rt")]
rows = [r for r in rows if len(r) == 65 and r[0].replace(".", "").isdigit()]
def write(path, part, with_label=True):
    with open(path, "w") as f:
        f.write(",".join([f"p{i}" for i in range(64)] + (["digit"] if with_label else [])) + "\n")
        for r in part:
            f.write(",".join([f"{float(v) / 16:g}" for v in r[:64]] + ([str(int(float(r[64])))] if with_label else [])) + "\n")
write(f"{out}/digits-train.csv", rows[:-200])
write(f"{out}/digits-holdout.csv", rows[-200:])
write(f"{out}/digits-holdout-12.csv", rows[-12:])
PY

echo "== starting anvild on 127.0.0.1:${port} (data dir ${root}, CPU worker)"
"${build}/server/anvild" --address "127.0.0.1:${port}" --metrics-address 127.0.0.1:0 --data-dir "${root}" \
  --datasets-dir "${datasets}" > "${root}/anvild.log" 2>&1 &
server=$!
trap 'kill -TERM ${server} 2>/dev/null || true; wait ${server} 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  "${anvil[@]}" health > /dev/null 2>&1 && break
  kill -0 "${server}" 2>/dev/null || { cat "${root}/anvild.log"; exit 1; }
  sleep 0.2
done
"${anvil[@]}" health

echo
echo "== submitting examples/specs/digits-cnn.json and watching it"
"${anvil[@]}" submit examples/specs/digits-cnn.json --watch

echo
echo "== predicting 12 held-out digits (never seen in training); the file's digit column is the truth"
"${anvil[@]}" predict digits-cnn --input "${root}/datasets/digits-holdout-12.csv" --label-column digit --top-k 1

echo
echo "== exporting"
"${anvil[@]}" export digits-cnn --format native -o "${root}/exports/digits-cnn.anvil"
"${anvil[@]}" export digits-cnn --format safetensors -o "${root}/exports/digits-cnn.safetensors"
# ONNX with a symbolic batch, checked in OpenCV DNN by the server before it is sent.
"${anvil[@]}" export digits-cnn --format onnx --verify -o "${root}/exports/digits-cnn.onnx"

echo
echo "== where everything is"
echo "  job store      ${root}/anvil.db (SQLite: jobs, metric history, model registry)"
echo "  job files      ${root}/jobs/<job id>/ (checkpoint, model archive)"
echo "  curves         ${root}/jobs/<job id>/tensorboard/ (tensorboard --logdir ${root}/jobs)"
echo "  exports        ${root}/exports/"
echo "  server log     ${root}/anvild.log"
metrics_url=$(sed -n 's/.*metrics on \(http[^ ]*\).*/\1/p' "${root}/anvild.log" | tail -1)
echo "  metrics        ${metrics_url} (Prometheus text format; a sample:)"
python3 - "${metrics_url}" <<'PY' || true
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
for line in text.splitlines():
    if line.startswith(("anvil_job_loss", "anvil_jobs_finished_total", "anvil_predict_requests_total")):
        print("                 " + line)
PY
echo "  more           ${anvil[*]} jobs | models | watch ID | --help"
echo
echo "== stopping anvild"
kill -TERM "${server}"
wait "${server}"
trap - EXIT
echo "done"
