#!/usr/bin/env bash
# A soak (ctest label "soak", `make soak`, run by CI): 256 concurrent Predict loops against a
# real anvild while a job trains, 20 s of warm-up then SECONDS (60) measured. Over the
# measured part anvild's resident memory and thread count must stay flat (within 10 %), every
# call must succeed or be refused with RESOURCE_EXHAUSTED (the bounded queue), and the server
# must still answer afterwards.
#   soak_test.sh BUILD_DIR [SECONDS]
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" soak
seconds="${2:-60}"
start_anvild
anvil=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")
pid="${pids[-1]}"
cat > "${work}/model.json" <<'JSON'
{"name": "soak-model", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 1, "batch_size": 32}
JSON
"${anvil[@]}" submit "${work}/model.json" --watch > /dev/null || fail "the model to serve did not train"
cat > "${work}/train.json" <<'JSON'
{"name": "soak-train", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 100000, "batch_size": 32}
JSON
[[ "${SOAK_TRAIN:-1}" == 1 ]] && "${anvil[@]}" submit "${work}/train.json" > /dev/null

/usr/bin/python3 - "${grpc_port}" "${seconds}" "${build}/python" "${pid}" <<'PY'
import struct, sys, threading, time
port, seconds, stubs, pid = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
sys.path.insert(0, stubs)
import grpc
from anvil.v1 import anvil_pb2 as pb, anvil_pb2_grpc as rpc

def sample():
    fields = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["Threads"])

channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for _ in range(8)]
raw = struct.pack("<8f", *([0.5, -1.0] * 4))
request = pb.PredictRequest(model="soak-model", inputs=[pb.Tensor(dtype=pb.FLOAT32, shape=[4, 2], raw=raw)])
counts = {"ok": 0, "exhausted": 0, "other": 0}
errors = []
lock = threading.Lock()
warmup = 20.0  # pools, caches, batches, the store's page cache and the metric history fill up
stop = time.time() + warmup + seconds

def loop(i):
    stub = rpc.ServingStub(channels[i % len(channels)])
    while time.time() < stop:
        try:
            stub.Predict(request, timeout=30)
            key = "ok"
        except grpc.RpcError as e:
            key = "exhausted" if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else "other"
            if key == "other":
                with lock:
                    errors.append(f"{e.code()}: {e.details()}")
        with lock:
            counts[key] += 1

threads = [threading.Thread(target=loop, args=(i,)) for i in range(256)]
for t in threads:
    t.start()
time.sleep(warmup)
rss0, threads0 = sample()
samples = []
while time.time() < stop:
    time.sleep(1.0)
    samples.append(sample())
for t in threads:
    t.join()
rss1, threads1 = samples[-2] if len(samples) > 1 else sample()  # still under load
print(f"calls: {counts}; RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB (max {max(s[0] for s in samples) / 2**20:.1f}); "
      f"threads {threads0} -> {threads1}")
print("RSS every 5 s (MiB):", " ".join(f"{s[0] / 2**20:.0f}" for s in samples[::5]))
if errors:
    sys.exit(f"FAIL: {len(errors)} calls failed, e.g. {errors[:3]}")
if counts["ok"] == 0:
    sys.exit("FAIL: no Predict succeeded")
if abs(rss1 - rss0) > 0.10 * rss0:
    sys.exit(f"FAIL: resident memory moved {100 * (rss1 - rss0) / rss0:+.1f} % under steady load")
if abs(threads1 - threads0) > max(2, 0.10 * threads0):
    sys.exit(f"FAIL: thread count moved from {threads0} to {threads1}")
PY
"${anvil[@]}" health > /dev/null || fail "the server does not answer after the soak"
if [[ "${SOAK_TRAIN:-1}" == 1 ]]; then
  state=$("${anvil[@]}" jobs --state RUNNING | grep -c soak-train || true)
  [[ "${state}" == 1 ]] || fail "the training job is not running any more"
fi
echo "ok: soak"
