#!/usr/bin/env bash
# perf_analyzer, Triton's load generator, against anvild's KServe v2 service (unchanged: the
# binary the tritonclient 2.41 wheel ships), on the digits MLP at concurrency 1, 8 and 64.
# The same load through anvil.v1's Predict, side by side, is anvil_bench_serving's
# "batching on" / "KServe v2 ModelInfer" rows (one client harness for both protocols).
#   bench/kserve_perf_analyzer.sh [BUILD_DIR] [DATA_DIR]
# Fetches (once, into .venv-bench/perf/): the wheel's perf_analyzer, and the CUDA 12 runtime
# library it links (nvidia-cuda-runtime-cu12; no GPU is used); libb64 comes from Debian
# (scripts/install-deps.sh bench). PERF_SECONDS: measurement window per run (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
build="$(cd "${1:-build}" && pwd)"
datasets="$(cd "${2:-data}" && pwd)"
seconds="${PERF_SECONDS:-3}"
venv=.venv-bench
perf="${venv}/perf"
if [[ ! -x "${perf}/perf_analyzer" ]]; then
  [[ -x "${venv}/bin/python" ]] || python3 -m venv "${venv}"
  mkdir -p "${perf}"
  "${venv}/bin/python" -m pip download --quiet --no-deps "tritonclient[all]==2.41.0" -d "${perf}/wheel"
  "${venv}/bin/python" - "${perf}" <<'PY'
import glob, os, sys, zipfile
out = sys.argv[1]
wheel = glob.glob(os.path.join(out, "wheel", "tritonclient-2.41.0-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    data = z.read("tritonclient-2.41.0.data/data/bin/perf_analyzer")
with open(os.path.join(out, "perf_analyzer"), "wb") as f:
    f.write(data)
os.chmod(os.path.join(out, "perf_analyzer"), 0o755)
PY
  "${venv}/bin/python" -m pip install --quiet nvidia-cuda-runtime-cu12
fi
cudart_dir=$("${venv}/bin/python" -c "import nvidia.cuda_runtime, os; print(os.path.join(nvidia.cuda_runtime.__path__[0], 'lib'))")
export LD_LIBRARY_PATH="${cudart_dir}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"

work="$(mktemp -d /tmp/anvil-perf-XXXXXX)"
"${build}/server/anvild" --address 127.0.0.1:0 --metrics-address "" --data-dir "${work}/data" \
  --datasets-dir "${datasets}" > "${work}/anvild.log" 2>&1 &
anvild=$!
trap 'kill ${anvild} 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "${work}"' EXIT
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "${work}/anvild.log")
  [[ -n "${port}" ]] && break
  sleep 0.1
done
[[ -n "${port}" ]] || { cat "${work}/anvild.log"; exit 1; }
printf '{"name": "digits-mlp", "model_preset": "mlp", "dataset": {"name": "digits"}, "epochs": 1}\n' > "${work}/spec.json"
"${build}/client/anvil" --server "127.0.0.1:${port}" submit "${work}/spec.json" --watch > /dev/null

echo "# KServe v2 ModelInfer measured by perf_analyzer (tritonclient 2.41), digits MLP [1, 1, 8, 8] float32"
echo
echo "- kernels: $(grep -m1 -o 'CPU .*threads' "${work}/anvild.log")"
echo "- command: bench/kserve_perf_analyzer.sh (perf_analyzer -i grpc --concurrency-range N" \
  "--measurement-interval $((seconds * 1000)), batch 1, raw input)"
echo
echo "| clients | infer/s | p50 us | p99 us |"
echo "|---:|---:|---:|---:|"
for c in 1 8 64; do
  "${perf}/perf_analyzer" -m digits-mlp -u "127.0.0.1:${port}" -i grpc --concurrency-range "${c}" \
    --measurement-interval "$((seconds * 1000))" --stability-percentage 50 --max-trials 5 \
    -f "${work}/c${c}.csv" > "${work}/c${c}.log" 2>&1 || { tail -5 "${work}/c${c}.log" >&2; continue; }
  python3 - "${work}/c${c}.csv" "${c}" <<'PY'
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
print(f"| {sys.argv[2]} | {float(row['Inferences/Second']):.0f} | {row['p50 latency']} | {row['p99 latency']} |")
PY
done
