"""PyTorch 2.x's side of bench/amp_bench.cc: float32 against bfloat16 on the CPU, with the thread
count given as the first argument. Prints "version\t<v>", then "gemm\t<n>\t<fp32 GFLOP/s>\t<bf16
GFLOP/s>" for torch.mm at n = 1024, 2048, "conv\t<name>\t<fp32 ms>\t<bf16 ms>" for a convolution's
forward and backward on float32 and on bfloat16 operands, and "step\t<name>\t<fp32 ms>\t<bf16 ms>" for a training
step (forward and loss under torch.autocast("cpu", torch.bfloat16), backward, SGD with momentum)
of the same models, timed as the program times its own (median of 7 batches of >= 200 ms after a
warm-up)."""
import sys
import time

import torch
import torch.nn as nn


def seconds_per_call(f):
    f()
    t0 = time.perf_counter()
    f()
    once = max(time.perf_counter() - t0, 1e-6)
    calls = max(1, int(0.2 / once))
    batches = []
    for _ in range(7):
        s = time.perf_counter()
        for _ in range(calls):
            f()
        batches.append((time.perf_counter() - s) / calls)
    return sorted(batches)[3]


def mlp():
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def lenet5_digits():
    # The lenet5 preset on 1x8x8 images: both convolutions "same" (the input is under 20 wide).
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5, padding=2),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


def step_ms(model, x, y, bf16):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return 1e3 * seconds_per_call(step)


# The convolution rows of amp_bench.cc: name, input, weight, padding.
CONVS = (("digits2", (64, 6, 4, 4), (16, 6, 5, 5), 2), ("mid", (32, 16, 28, 28), (32, 16, 3, 3), 1),
         ("wide", (16, 64, 56, 56), (64, 64, 3, 3), 1))


def conv_ms(xs, ws, pad, dtype):
    torch.manual_seed(3)
    x = torch.randn(xs).to(dtype).requires_grad_()
    w = torch.randn(ws).to(dtype).requires_grad_()
    b = torch.randn(ws[0]).to(dtype).requires_grad_()
    gy = torch.randn(xs[0], ws[0], xs[2] + 2 * pad - ws[2] + 1, xs[3] + 2 * pad - ws[3] + 1).to(dtype)

    def step():
        x.grad = w.grad = b.grad = None
        nn.functional.conv2d(x, w, b, padding=pad).backward(gy)

    return 1e3 * seconds_per_call(step)


def main():
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    print(f"version\t{torch.__version__.split('+')[0]}", flush=True)
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a16, b16 = a.bfloat16(), b.bfloat16()
        flop = 2.0 * n * n * n
        g32 = flop / seconds_per_call(lambda: torch.mm(a, b)) / 1e9
        g16 = flop / seconds_per_call(lambda: torch.mm(a16, b16)) / 1e9
        print(f"gemm\t{n}\t{g32:.1f}\t{g16:.1f}", flush=True)
    for name, xs, ws, pad in CONVS:
        print(f"conv\t{name}\t{conv_ms(xs, ws, pad, torch.float32):.3f}\t{conv_ms(xs, ws, pad, torch.bfloat16):.3f}",
              flush=True)
    torch.manual_seed(2)
    for name, model, shape, batch in (("mlp", mlp(), (784,), 256), ("lenet5", lenet5_digits(), (1, 8, 8), 64)):
        x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))
        print(f"step\t{name}\t{step_ms(model, x, y, False):.3f}\t{step_ms(model, x, y, True):.3f}", flush=True)


if __name__ == "__main__":
    main()
