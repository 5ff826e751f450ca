#!/usr/bin/env bash
# Every PromQL expression in the Grafana dashboards returns data from a real Prometheus
# (Debian's prometheus package) scraping a real anvild after a short job and some predictions.
# This is how we know the dashboards work. The GPU panels read NVML through a stand-in driver
# library (the build's libanvil_fake_nvml.so, loaded the way the real one is) on machines
# without a GPU; tests/gpu/check.sh scrapes the real one.
#   dashboards_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" dashboards
src="$(cd "$2" && pwd)"
command -v prometheus > /dev/null || fail "prometheus is missing (make deps installs Debian's prometheus package)"

nvml="${build}/tests/server/libanvil_fake_nvml.so"
[[ -f "${nvml}" ]] || fail "missing ${nvml} (built with the server tests)"
start_anvild ANVIL_NVML_LIBRARY="${nvml}"
prom_port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
cat > "${work}/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: anvil
    static_configs:
      - targets: ["127.0.0.1:${metrics_port}"]
YAML
prometheus --config.file="${work}/prometheus.yml" --storage.tsdb.path="${work}/tsdb" \
  --web.listen-address="127.0.0.1:${prom_port}" > "${work}/prometheus.log" 2>&1 &
pids+=($!)

cli=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")
cat > "${work}/job.json" <<JSON
{"name": "dash", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 30, "batch_size": 32, "metric_interval": 5,
 "precision": "fp16"}
JSON
"${cli[@]}" submit "${work}/job.json" --watch > /dev/null || fail "the job failed"
# A job whose inputs are raw pixel values in [0, 255]: the training doctor's INPUT_NOT_NORMALIZED
# fires on its first batch, so the findings panel has a series.
mkdir -p "${work}/data"
write_pixels_csv "${work}/data/pixels.csv"
cat > "${work}/pixels.json" <<JSON
{"name": "pixels", "model_preset": "mlp", "dataset": {"path": "pixels.csv"}, "epochs": 1, "batch_size": 16}
JSON
"${cli[@]}" submit "${work}/pixels.json" --watch > /dev/null || fail "the raw-pixel job failed"
# Traffic across several scrapes: good requests, and bad ones the CLI would refuse before
# sending (a wrong shape), sent with the generated Python stubs so the server counts them.
/usr/bin/python3 - "127.0.0.1:${grpc_port}" "${build}/python" <<'PY' || fail "predict traffic"
import struct, sys, time
sys.path.insert(0, sys.argv[2])
import grpc
from anvil.v1 import anvil_pb2 as pb, anvil_pb2_grpc as rpc
serving = rpc.ServingStub(grpc.insecure_channel(sys.argv[1]))
good = pb.PredictRequest(model="dash", inputs=[pb.Tensor(dtype=pb.FLOAT32, shape=[2, 2], raw=struct.pack("<4f", 0.5, -1, 3, 2.5))])
bad = pb.PredictRequest(model="dash", inputs=[pb.Tensor(dtype=pb.FLOAT32, shape=[1, 3], raw=b"\0" * 12)])
end = time.time() + 8
while time.time() < end:
    serving.Predict(good, timeout=10)
    try:
        serving.Predict(bad, timeout=10)
    except grpc.RpcError:
        pass
    time.sleep(0.05)
PY

python3 - "${prom_port}" "${src}/deploy/grafana/dashboards"/*.json <<'PY'
import json, sys, time, urllib.parse, urllib.request
port, files = sys.argv[1], sys.argv[2:]
def query(expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    reply = json.load(urllib.request.urlopen(url, timeout=10))
    assert reply["status"] == "success", reply
    return reply["data"]["result"]
failures, checked = [], 0
for path in files:
    dashboard = json.load(open(path))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$job", ".+").replace("$model", ".+")
            result = []
            for _ in range(10):  # rate() needs two scrapes in its window
                result = query(expr)
                if result:
                    break
                time.sleep(1)
            checked += 1
            if not result:
                failures.append(f"{dashboard['title']} / {panel['title']}: {expr}")
    for var in dashboard["templating"]["list"]:  # the variable's label_values query has values
        metric = var["query"]["query"].split("(")[1].split(",")[0]
        if not query(metric):
            failures.append(f"{dashboard['title']} variable {var['name']}: no {metric}")
print(f"{checked} panel queries checked")
if failures:
    print("empty results:\n  " + "\n  ".join(failures))
    sys.exit(1)
PY
echo "every dashboard query returns data"
