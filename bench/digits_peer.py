#!/usr/bin/python3
"""The PyTorch side of anvil_bench_digits: the digits presets trained with the same recipe.

    digits_peer.py DIGITS_CSV_GZ PRESET THREADS

Same data (the file Anvil reads), same 80/20 split sizes, same architecture and recipe
(AdamW 3e-3 with a one-cycle schedule, batch 64, 40 epochs, inputs / 16). Prints one JSON line.
"""
import gzip
import json
import sys
import time

import numpy as np
import torch
from torch import nn


def preset(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding="same"), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, padding="same"), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 2 * 2, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def main():
    path, name, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(rows[:, :64] / 16.0)
    y = torch.from_numpy(rows[:, 64].astype(np.int64))
    if name != "mlp":
        x = x.reshape(-1, 1, 8, 8)
    perm = torch.randperm(len(x))
    n_train = int(0.8 * len(x)) + (1 if len(x) - int(0.8 * len(x)) - int(0.2 * len(x)) > 0 else 0)
    tr, te = perm[:n_train], perm[n_train:]
    model = preset(name)
    epochs, batch = 40, 64
    steps_per_epoch = (len(tr) + batch - 1) // batch
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=epochs * steps_per_epoch)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[tr], y[tr]), batch_size=batch, shuffle=True)
    t0 = time.perf_counter()
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            sched.step()
    secs = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        acc = (model(x[te]).argmax(1) == y[te]).float().mean().item()
    print(json.dumps({"seconds": secs, "accuracy": acc, "steps": epochs * steps_per_epoch}))


if __name__ == "__main__":
    main()
