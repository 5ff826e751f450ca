"""PyTorch 2.x's side of bench/train_bench.cc: the same training step (zero_grad, forward,
cross-entropy, backward, SGD with momentum 0.9) or convolution row, timed like the C++
harness (batches of >= 20 ms after warm-up, the median of ROUNDS), with THREADS intra-op
threads. Prints "version\t<v>" and "ms\t<median ms per call>".

    train_peer.py ROW THREADS ROUNDS     ROW: mlp64, mlp256, mlp784, lenet5, conv_fwd, conv_fwd_bwd
"""
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(widths):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def lenet5():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


def step_fn(row):
    torch.manual_seed(7)
    if row.startswith("conv"):
        backward = row == "conv_fwd_bwd"
        x = torch.randn(32, 16, 28, 28)
        w = (torch.randn(32, 16, 3, 3) * 0.1).requires_grad_(backward)
        b = torch.zeros(32).requires_grad_(backward)

        def run():
            out = F.conv2d(x, w, b, padding=1)
            if backward:
                out.sum().backward()
        return run
    model, x = {
        "mlp64": lambda: (mlp([64, 128, 128, 10]), torch.randn(64, 64)),
        "mlp256": lambda: (mlp([64, 128, 128, 10]), torch.randn(256, 64)),
        "mlp784": lambda: (mlp([784, 256, 10]), torch.randn(128, 784)),
        "lenet5": lambda: (lenet5(), torch.randn(64, 1, 28, 28)),
    }[row]()
    y = torch.randint(0, 10, (x.shape[0],))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def run():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return run


def main():
    row, threads, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    run = step_fn(row)
    for _ in range(5):
        run()
    # Calls per batch: enough for 20 ms.
    t0 = time.perf_counter()
    run()
    per_call = max(time.perf_counter() - t0, 1e-6)
    calls = max(1, int(0.02 / per_call))
    times = []
    for _ in range(rounds):
        time.sleep(0.1)  # a quiet start, as the C++ harness waits for spinning pools
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        times.append((time.perf_counter() - t0) / calls)
    print(f"version\t{torch.__version__.split('+')[0]}")
    print(f"ms\t{statistics.median(times) * 1e3:.4f}")


if __name__ == "__main__":
    main()
