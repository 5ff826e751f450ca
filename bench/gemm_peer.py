"""PyTorch 2.x's float32 GEMM (torch.mm on MKL) on the shapes bench/gemm_bench.cc writes to
the file named by the first argument, one thread; prints "version\t<v>" then
"row\t<shape name>\t<GFLOP/s>" lines for that program."""
import sys
import time

import torch


def shapes(path):
    """The shapes bench/gemm_bench.cc passes: "name\tm\tn\tk\tta\ttb" per line."""
    with open(path) as f:
        for line in f:
            name, m, n, k, ta, tb = line.rstrip("\n").split("\t")
            yield name, int(m), int(n), int(k), ta == "1", tb == "1"


def main():
    torch.set_num_threads(1)
    path = sys.argv[1]
    print(f"version\t{torch.__version__.split('+')[0]}")
    for name, m, n, k, ta, tb in shapes(path):
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
