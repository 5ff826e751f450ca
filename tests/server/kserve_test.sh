#!/usr/bin/env bash
# anvild's KServe v2 / Open Inference Protocol service driven by tritonclient.grpc, Triton's
# own Python client from PyPI, unchanged (ctest label "system"): liveness, readiness, server
# and model metadata, Triton's model configuration, ModelInfer with raw and with typed
# contents, compared with the same model's outputs through anvil.v1.Serving's Predict, and
# errors with the protocol's codes. Skips when tritonclient is not installed in .venv
# (scripts/install-test-peers.sh).
#   kserve_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" kserve
use_peer_python "$(cd "$2" && pwd)" tritonclient.grpc numpy
start_anvild
anvil=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")
cat > "${work}/spec.json" <<JSON
{"name": "kmodel", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 1, "batch_size": 32, "seed": 5}
JSON
"${anvil[@]}" submit "${work}/spec.json" --watch > /dev/null || fail "the model did not train"
printf '0.5,-1\n3,2.5\n-2,1\n1,1\n0,0\n' > "${work}/x.csv"
"${anvil[@]}" --json predict kmodel --input "${work}/x.csv" > "${work}/predict.json" || fail "anvil predict"

"${python}" - "127.0.0.1:${grpc_port}" "${work}/predict.json" <<'PY' || fail "tritonclient against anvild"
import base64, json, sys
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

url, predict_json = sys.argv[1], sys.argv[2]
c = grpcclient.InferenceServerClient(url)
assert c.is_server_live() and c.is_server_ready()
assert c.is_model_ready("kmodel") and not c.is_model_ready("nope")
assert c.get_server_metadata().name == "anvil"

meta = c.get_model_metadata("kmodel")
assert meta.name == "kmodel" and meta.platform == "anvil" and list(meta.versions) == ["1"], meta
(inp,), (out,) = meta.inputs, meta.outputs
assert inp.datatype == "FP32" and list(inp.shape) == [-1, 2], inp
assert out.datatype == "FP32" and list(out.shape) == [-1, 4], out
config = c.get_model_config("kmodel").config
assert config.max_batch_size >= 1 and list(config.input[0].dims) == [2], config

x = np.array([[0.5, -1], [3, 2.5], [-2, 1], [1, 1], [0, 0]], dtype=np.float32)
request = grpcclient.InferInput(inp.name, list(x.shape), "FP32")
request.set_data_from_numpy(x)
result = c.infer("kmodel", [request], outputs=[grpcclient.InferRequestedOutput(out.name)], request_id="r1")
y = result.as_numpy(out.name)
assert y.shape == (5, 4) and y.dtype == np.float32, (y.shape, y.dtype)
assert result.get_response().id == "r1" and result.get_response().model_version == "1"

# The same rows through anvil.v1.Serving's Predict (the CLI's JSON: raw bytes in base64).
anvil_out = json.load(open(predict_json))["outputs"][0]
anvil_y = np.frombuffer(base64.b64decode(anvil_out["raw"]), dtype=np.float32).reshape(
    [int(d) for d in anvil_out["shape"]])
np.testing.assert_allclose(y, anvil_y, rtol=1e-5, atol=1e-6)

# Typed contents instead of raw bytes: the request built from the protocol's messages.
typed = service_pb2.ModelInferRequest(model_name="kmodel")
t = typed.inputs.add(name=inp.name, datatype="FP32", shape=[5, 2])
t.contents.fp32_contents.extend(x.reshape(-1).tolist())
typed_y = np.frombuffer(c._client_stub.ModelInfer(typed).raw_output_contents[0], dtype=np.float32).reshape(5, 4)
np.testing.assert_allclose(typed_y, y, rtol=1e-6, atol=1e-7)

def expect_error(code, fn, needle):
    try:
        fn()
    except InferenceServerException as e:
        assert e.status() == code, (e.status(), e.message())
        assert needle in e.message(), e.message()
        return
    raise AssertionError(f"expected {code}")
bad = grpcclient.InferInput(inp.name, [5, 3], "FP32")
bad.set_data_from_numpy(np.zeros((5, 3), dtype=np.float32))
expect_error("StatusCode.INVALID_ARGUMENT", lambda: c.infer("kmodel", [bad]), "2")
expect_error("StatusCode.NOT_FOUND", lambda: c.infer("nope", [request]), "nope")
strings = grpcclient.InferInput(inp.name, [1], "BYTES")
strings.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
expect_error("StatusCode.INVALID_ARGUMENT", lambda: c.infer("kmodel", [strings]), "BYTES")
expect_error("StatusCode.INVALID_ARGUMENT",
             lambda: c.infer("kmodel", [request], outputs=[grpcclient.InferRequestedOutput("logits?")]), "logits?")
print("  live/ready/metadata/config, raw and typed ModelInfer equal to Predict, errors with their codes")
PY
# Counted with the Predicts, by model and code.
curl_out=$(python3 -c "import urllib.request,sys; print(urllib.request.urlopen('http://127.0.0.1:${metrics_port}/metrics').read().decode())")
grep -q 'anvil_predict_requests_total{code="OK",model="kmodel"} [3-9]' <<< "${curl_out}" || fail "ModelInfer not counted: $(grep predict_requests <<< "${curl_out}")"
echo "ok: kserve"
