"""PyTorch 2.x's float32 GEMM (torch.mm on MKL) on the shapes of bench/gemm_bench.cc, one
thread; prints "version\t<v>" then "row\t<shape name>\t<GFLOP/s>" lines for that program."""
import time

import torch

SHAPES = [
    ("square 256", 256, 256, 256, False, False),
    ("square 512", 512, 512, 512, False, False),
    ("square 1024", 1024, 1024, 1024, False, False),
    ("MLP 256x128 x W^T[128x128]", 256, 128, 128, False, True),
    ("784-256 fwd: x[128x784] W^T", 128, 256, 784, False, True),
    ("784-256 dX: dY[128x256] W", 128, 784, 256, False, False),
    ("784-256 dW: dY^T X[128x784]", 256, 784, 128, True, False),
    ("1024-1024 fwd: x[256x1024] W^T", 256, 1024, 1024, False, True),
    ("half batch 64: x[32x128] W^T", 32, 128, 128, False, True),
    ("head: x[128x128] W^T[10x128]", 128, 10, 128, False, True),
    ("conv columns: W[16x150] cols", 16, 576, 150, False, False),
    ("LeNet fc1 dW: dY^T X[64x400]", 120, 400, 64, True, False),
    ("LeNet fc3: x[32x84] W^T[10x84]", 32, 10, 84, False, True),
]


def main():
    torch.set_num_threads(1)
    print(f"version\t{torch.__version__.split('+')[0]}")
    for name, m, n, k, ta, tb in SHAPES:
        a = torch.rand(k, m).t() if ta else torch.rand(m, k)
        b = torch.rand(n, k).t() if tb else torch.rand(k, n)
        out = torch.empty(m, n)
        torch.mm(a, b, out=out)
        flop = 2.0 * m * n * k
        reps = max(1, int(0.05 / (flop / 100e9)))
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b, out=out)
            best = min(best, (time.perf_counter() - t0) / reps)
        print(f"row\t{name}\t{flop / best / 1e9:.1f}", flush=True)


if __name__ == "__main__":
    main()
