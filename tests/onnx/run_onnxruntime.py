"""Runs exported ONNX files in onnxruntime on the inputs Anvil ran, and prints the largest
absolute difference from Anvil's outputs per case (one line each: "batch max_abs_error"), the
manifests' cases in order.

  run_onnxruntime.py MANIFEST.json [MANIFEST.json ...]

The manifest: {"model": path, "cases": [{"input": path, "input_shape": [...],
"input_dtype": "float32"|"int64", "output": path, "output_shape": [...]}]}; tensors are raw
little-endian files. Exits 1 when onnxruntime's output shape differs from Anvil's.
"""
import json
import sys

import numpy as np
import onnxruntime as ort

options = ort.SessionOptions()
options.intra_op_num_threads = 1
for path in sys.argv[1:]:
    manifest = json.load(open(path))
    session = ort.InferenceSession(manifest["model"], options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    for case in manifest["cases"]:
        x = np.fromfile(case["input"], dtype=case["input_dtype"]).reshape(case["input_shape"])
        expected = np.fromfile(case["output"], dtype=np.float32).reshape(case["output_shape"])
        (got,) = session.run(None, {input_name: x})
        if got.shape != expected.shape:
            print(f"{manifest['model']}: shape {got.shape} != {expected.shape}", file=sys.stderr)
            sys.exit(1)
        err = float(np.max(np.abs(got.astype(np.float64) - expected))) if got.size else 0.0
        print(case["input_shape"][0], err)
