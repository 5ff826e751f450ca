"""The PyTorch side of cuda_bench's training-step rows: the same MLP and CNN, the same batch
sizes, SGD with momentum, timed with CUDA events after warm-ups (ms per step)."""
import sys

import torch
from torch import nn


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / reps


def step_ms(model, x, y, reps):
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    return time_ms(step, 5, reps)


def main():
    reps = 5 if "--quick" in sys.argv else 20
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
    x, y = torch.randn(512, 1024, device="cuda"), torch.randint(0, 10, (512,), device="cuda")
    print(f"{'mlp train step (torch)':34s} {step_ms(mlp, x, y, reps):12.3f}")
    cnn = nn.Sequential(nn.Conv2d(3, 32, 3, padding="same"), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding="same"), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
    x, y = torch.randn(256, 3, 32, 32, device="cuda"), torch.randint(0, 10, (256,), device="cuda")
    print(f"{'cnn train step (torch)':34s} {step_ms(cnn, x, y, reps):12.3f}")


if __name__ == "__main__":
    main()
