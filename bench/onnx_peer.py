"""onnxruntime's side of anvil_bench_onnx: times InferenceSession.run on an exported file.

  onnx_peer.py MODEL.onnx THREADS LABEL BATCH [BATCH...]

Prints "version\t<onnxruntime version>" and "row\t<LABEL>\t<batch>\t<median ms per call>":
9 rounds of calls lasting about 20 ms each, after a warm-up, with intra-op threads = THREADS
(and one inter-op thread), float32 inputs drawn once per batch size.
"""
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

path, threads, label, batches = sys.argv[1], int(sys.argv[2]), sys.argv[3], [int(b) for b in sys.argv[4:]]
options = ort.SessionOptions()
options.intra_op_num_threads = threads
options.inter_op_num_threads = 1
session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
inp = session.get_inputs()[0]
print(f"version\t{ort.__version__}", flush=True)
for batch in batches:
    shape = [batch] + [int(d) for d in inp.shape[1:]]
    feed = {inp.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    for _ in range(50):
        session.run(None, feed)
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < 0.02:
        session.run(None, feed)
        calls += 1
    per_round = max(calls, 1)
    rounds = []
    for _ in range(9):
        t0 = time.perf_counter()
        for _ in range(per_round):
            session.run(None, feed)
        rounds.append((time.perf_counter() - t0) * 1e3 / per_round)
    print(f"row\t{label}\t{batch}\t{statistics.median(rounds):.6f}", flush=True)
