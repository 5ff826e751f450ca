"""Runs an exported int8 (QDQ) ONNX file in onnxruntime with its graph optimizations on, saves
the optimized graph, and reports which operators onnxruntime fused the model into and how far
its outputs are from Anvil's.

  run_onnxruntime_qdq.py MANIFEST.json

The manifest: {"model": path, "optimized": path, "cases": [{"input": path, "input_shape": [...],
"output": path, "output_shape": [...]}]}; tensors are raw little-endian float32 files.
Prints one JSON line: {"ops": [op types of the optimized graph, in order],
"errors": [largest absolute difference per case]}. Exits 1 when the checker refuses the model
or an output's shape differs from Anvil's.
"""
import json
import sys

import numpy as np
import onnx
import onnxruntime as ort

manifest = json.load(open(sys.argv[1]))
onnx.checker.check_model(onnx.load(manifest["model"]), full_check=True)

options = ort.SessionOptions()
options.intra_op_num_threads = 1
# EXTENDED runs the QDQ transformers (the int8 fusions) but not the layout rewrites of ALL,
# whose NCHWc nodes would hide the fused operators in the saved graph.
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
options.optimized_model_filepath = manifest["optimized"]
session = ort.InferenceSession(manifest["model"], options, providers=["CPUExecutionProvider"])
input_name = session.get_inputs()[0].name

errors = []
for case in manifest["cases"]:
    x = np.fromfile(case["input"], dtype=np.float32).reshape(case["input_shape"])
    expected = np.fromfile(case["output"], dtype=np.float32).reshape(case["output_shape"])
    (got,) = session.run(None, {input_name: x})
    if got.shape != expected.shape:
        print(f"shape {got.shape} != {expected.shape}", file=sys.stderr)
        sys.exit(1)
    errors.append(float(np.max(np.abs(got.astype(np.float64) - expected))) if got.size else 0.0)

optimized = onnx.load(manifest["optimized"])
print(json.dumps({"ops": [n.op_type for n in optimized.graph.node], "errors": errors}))
