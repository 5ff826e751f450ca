#!/usr/bin/python3
"""The PyTorch side of anvil_bench_data: the same two workloads with torch.utils.data.

    data_peer.py rss N        1 GiB TensorDataset, N workers: summed RSS and PSS at mid-epoch
    data_peer.py png DIR N T  torchvision ImageFolder pipeline over DIR, N workers, T threads

Prints one line of JSON. Runs on Debian's python3-torch / python3-torchvision / python3-pil.
"""
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def tree_memory_mib():
    """Summed RSS and PSS of this process and its children (the loader's worker processes)."""
    me = os.getpid()
    pids = [me]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        pids.append(int(entry))
            except (OSError, ValueError):
                pass
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return rss / 1024, pss / 1024


def rss(workers):
    torch.manual_seed(0)
    x = torch.rand(262144, 1024)
    y = torch.randint(0, 10, (262144,))
    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True, num_workers=workers)
    mid = len(loader) // 2
    out = {}
    t0 = time.perf_counter()
    for k, batch in enumerate(loader, 1):
        if k == mid:
            out["rss_sum_mib"], out["pss_sum_mib"] = tree_memory_mib()
    out["seconds"] = time.perf_counter() - t0
    print(json.dumps(out))


def png(root, workers, threads):
    torch.set_num_threads(threads)
    from torchvision import datasets, transforms
    pipeline = transforms.Compose([
        transforms.RandomCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = DataLoader(datasets.ImageFolder(root, pipeline), batch_size=32, shuffle=True,
                        num_workers=workers, persistent_workers=workers > 0)
    for _ in loader:  # warm-up pass, like the Anvil side
        pass
    n = 0
    t0 = time.perf_counter()
    for _ in range(4):
        for images, _ in loader:
            n += images.shape[0]
    print(json.dumps({"images_per_s": n / (time.perf_counter() - t0)}))


if __name__ == "__main__":
    if sys.argv[1] == "rss":
        rss(int(sys.argv[2]))
    else:
        png(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
