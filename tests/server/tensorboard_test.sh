#!/usr/bin/env bash
# A job's TensorBoard curves read back by the tensorboard package's own event reader (PyPI,
# in .venv: scripts/install-test-peers.sh) and compared with the job's stored metric history
# (`anvil --json watch`), point by point (ctest label "system"). Skips when the package is
# not installed.
#   tensorboard_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" tensorboard
use_peer_python "$(cd "$2" && pwd)" tensorboard
start_anvild
anvil=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")
cat > "${work}/spec.json" <<JSON
{"name": "curves", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 3, "batch_size": 32, "seed": 3,
 "metric_interval": 5}
JSON
"${anvil[@]}" submit "${work}/spec.json" --watch > /dev/null || fail "the job did not succeed"
id=$("${anvil[@]}" --json jobs | "${python}" -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['id'])")
"${anvil[@]}" --json watch "${id}" > "${work}/history.jsonl" || fail "watch"
"${python}" - "${work}/data/jobs/${id}/tensorboard" "${work}/history.jsonl" <<'PY' || fail "the curves differ from the history"
import json, math, os, sys
from tensorboard.backend.event_processing import event_accumulator

logdir, history = sys.argv[1], sys.argv[2]
files = [f for f in os.listdir(logdir) if f.startswith("events.out.tfevents.")]
assert len(files) == 1, files
acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
want = {"train/loss", "train/grad_norm", "train/learning_rate", "train/samples_per_second",
        "train/data_wait_ratio", "train/step_seconds", "epoch/train_loss", "val/loss", "val/accuracy"}
assert want <= tags, f"missing tags: {want - tags}"

events = [json.loads(line) for line in open(history)]
steps = [e for e in events if "step_metrics" in e]
epochs = [e for e in events if "epoch_metrics" in e]
def same(tag, expected):  # [(step, value)]
    got = [(s.step, s.value) for s in acc.Scalars(tag)]
    assert len(got) == len(expected), f"{tag}: {len(got)} points, history has {len(expected)}"
    for (gs, gv), (es, ev) in zip(got, expected):
        assert gs == es, f"{tag}: step {gs}, history {es}"
        assert math.isclose(gv, ev, rel_tol=1e-6, abs_tol=1e-12), f"{tag} at {gs}: {gv} vs {ev}"  # float32
same("train/loss", [(int(e["step"]), e["step_metrics"]["loss"]) for e in steps])
same("train/learning_rate", [(int(e["step"]), e["step_metrics"]["lr"]) for e in steps])
same("train/grad_norm", [(int(e["step"]), e["step_metrics"]["grad_norm"]) for e in steps])
same("val/accuracy", [(int(e["step"]), e["epoch_metrics"]["val_accuracy"]) for e in epochs])
same("epoch/train_loss", [(int(e["step"]), e["epoch_metrics"]["train_loss"]) for e in epochs])
print(f"  {len(steps)} step points and {len(epochs)} epoch points agree with the history")
PY
echo "ok: tensorboard"
