"""PyTorch 2.x's side of bench/quant_bench.cc: int8 inference against float32 on the CPU, with
torch.backends.quantized.engine = "fbgemm". Arguments: the thread counts to run (default 1 2).

Prints "version\t<v>", "engine\t<engine>", then "row\t<threads>\t<key>\t<ms>" per measurement, the
median milliseconds per forward of 7 batches of >= 100 ms after a warm-up, as the program times
its own. Keys:
  linear/<batch>/fp32        nn.Linear(1024, 1024)
  linear/<batch>/static_q    torch.ao.nn.quantized.Linear on a quantized input (quint8 in, quint8 out)
  linear/<batch>/static_f    the same layer from float to float: quantize_per_tensor, the layer,
                             dequantize (what Anvil's QuantizedLinear does in one forward)
  linear/<batch>/dynamic     torch.ao.nn.quantized.dynamic.Linear (float in, float out)
  <model>/<batch>/fp32|static|dynamic   the digits presets ("mlp", "lenet5"): float32; eager-mode
                             static int8 (QuantStub, fuse Linear/Conv2d-ReLU, prepare with the fbgemm
                             qconfig, 8 random calibration batches, convert; float in, float out);
                             quantize_dynamic({nn.Linear}, qint8)
"""
import copy
import sys
import time

import torch
import torch.ao.nn.quantized as nnq
import torch.ao.nn.quantized.dynamic as nnqd
import torch.ao.quantization as tq
import torch.nn as nn

LINEAR_BATCHES = (1, 32, 256)
MODEL_BATCHES = (1, 64)


def seconds_per_call(f):
    f()
    t0 = time.perf_counter()
    f()
    once = max(time.perf_counter() - t0, 1e-7)
    calls = max(1, int(0.1 / once))
    batches = []
    for _ in range(7):
        s = time.perf_counter()
        for _ in range(calls):
            f()
        batches.append((time.perf_counter() - s) / calls)
    return sorted(batches)[3]


def ms(f):
    return 1e3 * seconds_per_call(f)


class Quantized(nn.Module):
    """A float model between QuantStub and DeQuantStub: float in, float out, as Anvil's int8 models."""

    def __init__(self, body):
        super().__init__()
        self.quant, self.body, self.dequant = tq.QuantStub(), body, tq.DeQuantStub()

    def forward(self, x):
        return self.dequant(self.body(self.quant(x)))


def mlp_digits():
    # models::preset_spec("mlp", {64}, 10)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def lenet5_digits():
    # models::preset_spec("lenet5", {1, 8, 8}, 10): both convolutions "same" (the input is under 20 wide).
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5, padding=2),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


def fusable_pairs(body):
    """Indices [i, i + 1] of every Conv2d/Linear followed by ReLU."""
    mods = list(body)
    return [[str(i), str(i + 1)] for i in range(len(mods) - 1)
            if isinstance(mods[i], (nn.Conv2d, nn.Linear)) and isinstance(mods[i + 1], nn.ReLU)]


def static_int8(body, calibration):
    model = Quantized(copy.deepcopy(body)).eval()
    pairs = fusable_pairs(model.body)
    if pairs:
        model.body = tq.fuse_modules(model.body, pairs)
    model.qconfig = tq.get_default_qconfig("fbgemm")
    tq.prepare(model, inplace=True)
    with torch.inference_mode():
        for batch in calibration:
            model(batch)
    return tq.convert(model, inplace=True)


def linear_rows(threads, out):
    torch.manual_seed(1)
    fp32 = nn.Linear(1024, 1024).eval()
    calibration = [torch.randn(256, 1024) for _ in range(4)]
    static = static_int8(nn.Sequential(fp32), calibration)
    qlayer = static.body[0]
    assert isinstance(qlayer, nnq.Linear), type(qlayer)
    in_scale, in_zp = float(static.quant.scale), int(static.quant.zero_point)
    dynamic = tq.quantize_dynamic(nn.Sequential(fp32), {nn.Linear}, dtype=torch.qint8)[0]
    assert isinstance(dynamic, nnqd.Linear), type(dynamic)
    with torch.inference_mode():
        for batch in LINEAR_BATCHES:
            x = torch.randn(batch, 1024)
            xq = torch.quantize_per_tensor(x, in_scale, in_zp, torch.quint8)
            out(threads, f"linear/{batch}/fp32", ms(lambda: fp32(x)))
            out(threads, f"linear/{batch}/static_q", ms(lambda: qlayer(xq)))
            out(threads, f"linear/{batch}/static_f",
                ms(lambda: qlayer(torch.quantize_per_tensor(x, in_scale, in_zp, torch.quint8)).dequantize()))
            out(threads, f"linear/{batch}/dynamic", ms(lambda: dynamic(x)))


def model_rows(threads, out):
    for name, make, shape in (("mlp", mlp_digits, (64,)), ("lenet5", lenet5_digits, (1, 8, 8))):
        torch.manual_seed(2)
        fp32 = make().eval()
        static = static_int8(fp32, [torch.randn(64, *shape) for _ in range(8)])
        dynamic = tq.quantize_dynamic(copy.deepcopy(fp32), {nn.Linear}, dtype=torch.qint8)
        with torch.inference_mode():
            for batch in MODEL_BATCHES:
                x = torch.randn(batch, *shape)
                out(threads, f"{name}/{batch}/fp32", ms(lambda: fp32(x)))
                out(threads, f"{name}/{batch}/static", ms(lambda: static(x)))
                out(threads, f"{name}/{batch}/dynamic", ms(lambda: dynamic(x)))


def main():
    torch.backends.quantized.engine = "fbgemm"
    print(f"version\t{torch.__version__.split('+')[0]}", flush=True)
    print(f"engine\t{torch.backends.quantized.engine}", flush=True)

    def out(threads, key, value):
        print(f"row\t{threads}\t{key}\t{value:.4f}", flush=True)

    for threads in [int(a) for a in sys.argv[1:]] or [1, 2]:
        torch.set_num_threads(threads)
        linear_rows(threads, out)
        model_rows(threads, out)


if __name__ == "__main__":
    main()
