#!/usr/bin/env bash
# The Python client package (client/python, `pip install ./client/python`) against a real
# anvild (ctest label "system"): health, submit, watch, predict with numpy in and out, export
# with its checksum, errors as AnvilError with the gRPC code; and the stream's from_step
# boundary: StreamMetrics(from_step = S) starts *at* S (not after), and a watch that loses its
# stream (the server drained and restarted) resumes from the last step + 1 with every step
# exactly once. The package is installed into a venv of its own under the build folder; with
# no package index reachable the test skips.
#   python_client_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" pyclient
src="$(cd "$2" && pwd)"
venv="${build}/python-client-venv"
if [[ ! -x "${venv}/bin/python" ]] || ! "${venv}/bin/python" -c "import grpc_tools, numpy" 2> /dev/null; then
  python3 -m venv "${venv}" > /dev/null 2>&1 || { echo "SKIP: python3 -m venv failed"; exit 0; }
  "${venv}/bin/python" -m pip install --quiet grpcio grpcio-tools grpcio-health-checking numpy setuptools \
    > "${work}/pip.log" 2>&1 || { echo "SKIP: no package index ($(tail -1 "${work}/pip.log"))"; exit 0; }
fi
# The package itself, from this checkout (its build generates the stubs from proto/).
"${venv}/bin/python" -m pip install --quiet --no-deps --no-build-isolation --force-reinstall "${src}/client/python" \
  > "${work}/pip.log" 2>&1 || fail "pip install ./client/python: $(tail -5 "${work}/pip.log")"
(cd "${work}" && "${venv}/bin/python" -c "import anvil_client, sys; assert 'grpc' not in sys.modules or hasattr(sys.modules['grpc'], 'insecure_channel')") ||
  fail "anvil_client shadows grpcio"

port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
run_anvild() {
  "${build}/server/anvild" --address "127.0.0.1:${port}" --metrics-address "" --data-dir "${work}/data" \
    >> "${work}/anvild.log" 2>&1 &
  anvild_pid=$!
  pids+=("${anvild_pid}")
}
run_anvild
echo "${port}" > "${work}/port"

(cd "${work}" && "${venv}/bin/python" - "127.0.0.1:${port}" "${work}" <<'PY') &
import hashlib, math, os, sys, time
import numpy as np
import anvil_client
from anvil_client._gen import anvil_pb2 as pb

address, work = sys.argv[1], sys.argv[2]
c = anvil_client.Client(address)
for _ in range(100):
    if c.health():
        break
    time.sleep(0.1)
assert c.health()

# Submit, watch to the end, predict, export.
job = c.submit({"name": "py", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 2,
                "batch_size": 32, "metric_interval": 1, "seed": 2})
events = list(c.watch(job.id))
assert events[-1].kind == "state" and events[-1].state == "SUCCEEDED", events[-1]
steps = [e.step for e in events if e.kind == "step"]
assert steps == list(range(1, len(steps) + 1)), steps[:10]
assert all(e.loss_scale is None and e.skipped_steps is None for e in events if e.kind == "step")
# A float16 job's step events carry the loss scale (a power of two) and the skipped count.
half = c.submit({"name": "py-f16", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 1,
                 "batch_size": 32, "metric_interval": 1, "seed": 2, "precision": "fp16"})
scaled = [e for e in c.watch(half.id) if e.kind == "step"]
assert scaled and all(e.loss_scale > 0 and math.log2(e.loss_scale).is_integer() for e in scaled), scaled[:3]
assert all(a.skipped_steps <= b.skipped_steps for a, b in zip(scaled, scaled[1:])), scaled[:3]
x = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
p = c.predict("py", x, top_k=2)
# Replicas: a list of addresses, one of them dead (nothing listens there): round_robin skips
# it, every call succeeds, and health is SERVING.
import socket
with socket.socket() as dead:
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
spread = anvil_client.Client(f"127.0.0.1:{dead_port},{address}")
assert spread.health()
for _ in range(20):
    assert spread.predict("py", x, top_k=2).top_k == p.top_k
spread.close()
assert p.outputs["output"].shape == (4, 4) and p.outputs["output"].dtype == np.float32
assert len(p.top_k) == 4 and all(len(row) == 2 for row in p.top_k)
sha = c.export("py", os.path.join(work, "py.anvil"))
assert hashlib.sha256(open(os.path.join(work, "py.anvil"), "rb").read()).hexdigest() == sha
# ONNX: the file, and Anvil's outputs for onnxruntime to match (below, where a Python has it).
sha = c.export("py", os.path.join(work, "py.onnx"), format="onnx", opset=17)
assert hashlib.sha256(open(os.path.join(work, "py.onnx"), "rb").read()).hexdigest() == sha
assert c.export("py", os.path.join(work, "verified.onnx"), format="onnx", opset=17, verify=True) == sha
# The file back in as a model of its own: same outputs.
m = c.register_model("py-onnx", os.path.join(work, "py.onnx"))
assert m.name == "py-onnx" and m.version == 1 and m.job_id == "", m
again = c.predict("py-onnx", x)
assert np.allclose(again.outputs["output"], p.outputs["output"], atol=1e-5), (again.outputs, p.outputs)
try:
    open(os.path.join(work, "junk.onnx"), "wb").write(b"not an onnx file")
    c.register_model("bad", os.path.join(work, "junk.onnx"))
    raise AssertionError("expected INVALID_ARGUMENT")
except anvil_client.AnvilError as e:
    assert e.code.name == "INVALID_ARGUMENT", e
np.save(os.path.join(work, "x.npy"), x)
np.save(os.path.join(work, "y.npy"), p.outputs["output"])
try:
    c.export("py", os.path.join(work, "bad.onnx"), format="onnx", opset=99)
    raise AssertionError("expected INVALID_ARGUMENT")
except anvil_client.AnvilError as e:
    assert e.code.name == "INVALID_ARGUMENT" and "13 to 17" in str(e), e
assert not os.path.exists(os.path.join(work, "bad.onnx"))
try:
    c.predict("nope", x)
    raise AssertionError("expected NOT_FOUND")
except anvil_client.AnvilError as e:
    assert e.code.name == "NOT_FOUND", e
# The training doctor's findings: streamed as "finding" events and returned by findings(), the
# same codes either way, each with its evidence and advice.
streamed = {e.finding["code"] for e in events if e.kind == "finding"}
found = c.findings(job.id)
assert {f["code"] for f in found} == streamed, (found, streamed)
assert all(f["advice"] and f["evidence"] and f["severity"] in ("info", "warning", "critical") for f in found), found
try:
    c.findings("job-nope")
    raise AssertionError("expected NOT_FOUND")
except anvil_client.AnvilError as e:
    assert e.code.name == "NOT_FOUND", e
# What the doctor checked: healthy rules were checked ("checked" events, or the watchdog's
# STALLED); rules with too little to go on say what they need; no rule is in two lists.
checks = c.checks(job.id)
checked = {code for e in events if e.kind == "checked" for code in e.checked}
assert set(checks["healthy"]) - {"STALLED"} <= checked, (checks, checked)
assert "STALLED" in checks["healthy"], checks
assert all(needs for needs in checks["not_checked"].values()), checks
assert not (set(checks["healthy"]) & set(checks["not_checked"])) and not (streamed & set(checks["healthy"])), checks

# int8: the float version quantized (calibrated on its job's dataset), registered as version 2
# when it passes the gate; an imported ONNX graph quantizes dynamically or statically on a
# dataset given.
q = c.quantize("py", version="1", mode="static", max_accuracy_drop=5.0)
assert q.registered and q.model.version == 2 and q.model.precision == "int8", q
assert q.model.quantization == "static (histogram, 16 calibration batches)", q.model.quantization
assert q.layers and q.layers[0].type == "QuantizedLinear", q.layers
int8 = c.predict("py", x, version="2")
assert np.abs(int8.outputs["output"] - p.outputs["output"]).max() < 0.5
try:
    c.quantize("py-onnx", mode="dynamic")
    raise AssertionError("expected INVALID_ARGUMENT")
except anvil_client.AnvilError as e:
    assert e.code.name == "INVALID_ARGUMENT" and "give the dataset" in str(e), e
qd = c.quantize("py-onnx", mode="dynamic", dataset={"name": "blobs"}, seed=2, max_accuracy_drop=5.0)
assert qd.registered and qd.model.version == 2 and qd.model.quantization == "dynamic", qd
qo = c.quantize("py-onnx", version="1", mode="static", dataset={"name": "blobs"}, seed=2, max_accuracy_drop=5.0)
assert qo.registered and qo.model.version == 3 and qo.model.precision == "int8", qo
assert qo.model.quantization == "static (histogram, 16 calibration batches)", qo.model.quantization
# keep_float names an imported graph's nodes; one it does not have is INVALID_ARGUMENT.
try:
    c.quantize("py-onnx", version="1", mode="dynamic", dataset={"name": "blobs"}, seed=2, keep_float=["no-such-node"])
    raise AssertionError("expected INVALID_ARGUMENT")
except anvil_client.AnvilError as e:
    assert e.code.name == "INVALID_ARGUMENT" and "keep_float" in str(e) and "no-such-node" in str(e), e
for v in ("2", "3"):
    int8o = c.predict("py-onnx", x, version=v)
    assert np.abs(int8o.outputs["output"] - p.outputs["output"]).max() < 0.5, v

# The boundary: from_step = S starts at S, through the RPC and through the package.
s = steps[len(steps) // 2]
replay = list(c._training.StreamMetrics(pb.StreamMetricsRequest(job_id=job.id, from_step=s)))
replayed = [e.step for e in replay if e.WhichOneof("event") == "step_metrics"]
assert replayed and replayed[0] == s and replayed == list(range(s, steps[-1] + 1)), (s, replayed[:5])
again = [e.step for e in c.watch(job.id, from_step=s) if e.kind == "step"]
assert again == replayed, (again[:5], replayed[:5])

# A watch whose stream breaks: the test's shell drains and restarts the server meanwhile.
long = c.submit({"name": "long", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 40,
                 "batch_size": 8, "metric_interval": 1, "seed": 4, "checkpoint": {"every_steps": 7}})
seen, restarted, cancelled = [], False, False
for e in c.watch(long.id):
    if e.kind != "step":
        continue
    seen.append(e.step)
    if len(seen) == 30 and not restarted:
        open(os.path.join(work, "restart"), "w").close()  # the shell restarts anvild
        restarted = True
    if e.step >= 200 and not cancelled:
        # The stream may run ahead of the shell's restart: cancel on the new server, not on the
        # draining one (which refuses new calls with UNAVAILABLE).
        for _ in range(300):
            if os.path.exists(os.path.join(work, "restarted")):
                break
            time.sleep(0.1)
        c.cancel(long.id)  # while the new server starts, the client's retry policy covers UNAVAILABLE
        cancelled = True
assert restarted
assert seen == list(range(1, len(seen) + 1)), ("every step once, in order, across the restart", seen[25:40])
assert len(seen) > 30, len(seen)
print(f"  watch across a restart: steps 1..{len(seen)} each once; from_step={s} starts at {replayed[0]}")
# Listings page through (one page of one job here), and a finished job can be deleted.
assert [j.id for j in c.jobs(limit=1)] == [long.id], c.jobs(limit=1)
assert long.id in [j.id for j in c.jobs()]
c.delete(long.id)
assert long.id not in [j.id for j in c.jobs()]
try:
    c.job(long.id)
    raise AssertionError("a deleted job is still there")
except anvil_client.AnvilError as e:
    assert e.code.name == "NOT_FOUND", e
open(os.path.join(work, "done"), "w").close()
PY
client=$!
for _ in $(seq 600); do
  if [[ -f "${work}/restart" ]]; then
    rm -f "${work}/restart"
    kill -TERM "${anvild_pid}"
    wait "${anvild_pid}" 2> /dev/null || true
    run_anvild
    touch "${work}/restarted"
  fi
  [[ -f "${work}/done" ]] && break
  kill -0 "${client}" 2> /dev/null || break
  sleep 0.1
done
wait "${client}" || fail "the Python client failed"
[[ -f "${work}/done" ]] || fail "the Python client did not finish"
# The exported file in onnxruntime (the tests' Python peers, `make peers`), batch 4 as predicted.
peers="${src}/.venv/bin/python"
if [[ -x "${peers}" ]] && "${peers}" -c "import onnxruntime" 2> /dev/null; then
  "${peers}" - "${work}" <<'PY' || fail "onnxruntime disagrees with Predict"
import os, sys
import numpy as np
import onnxruntime as ort
work = sys.argv[1]
s = ort.InferenceSession(os.path.join(work, "py.onnx"), providers=["CPUExecutionProvider"])
assert s.get_inputs()[0].shape[0] == "batch", s.get_inputs()[0].shape
(y,) = s.run(None, {s.get_inputs()[0].name: np.load(os.path.join(work, "x.npy"))})
err = float(np.abs(y - np.load(os.path.join(work, "y.npy"))).max())
assert err <= 1e-4, err
print(f"  onnxruntime on the exported file: max |error| {err:.2g} against Predict")
PY
else
  echo "  (no onnxruntime in ${src}/.venv: the exported file's numerics are checked in tests/onnx only)"
fi
echo "ok: python client"
