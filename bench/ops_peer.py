"""PyTorch 2.x's side of bench/ops_bench.cc: the same rows (op names and sizes as that
program prints them), timed like its harness: warm-up, then ROUNDS batches of at least
BATCH_MS milliseconds, the median per-call time. Everything runs through Python, as a
PyTorch user's code does: the per-op rows (op chain, the per-point loop) include the
interpreter's share.

    ops_peer.py THREADS ROUNDS BATCH_MS [FILTER]

Prints "version\t<v>" and then "row\t<op>\t<size>\t<median ms per call>" per row.
"""
import statistics
import sys
import time

import torch


def timed(fn, rounds, batch_ms, scale=1.0):
    for _ in range(3):
        fn()
    calls = 1
    while True:  # calls per batch: enough for BATCH_MS
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if (time.perf_counter() - t0) * 1e3 >= batch_ms or calls >= 1 << 20:
            break
        calls *= 2
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) * 1e3 / calls)
    return statistics.median(per_call) * scale


def chain(y):
    for i in range(1000):
        r = i % 3
        if r == 0:
            y = y * 1.0001
        elif r == 1:
            y = y + 0.001
        else:
            y = torch.tanh(y)
    return y


def rows():
    """(op, size, make) where make() builds the inputs and returns (fn, scale)."""
    out = []
    for n in (256, 512, 1024, 2048):
        def mm(n=n):
            a, b = torch.randn(n, n), torch.randn(n, n)
            return (lambda: torch.mm(a, b)), 1.0
        out.append(("mm (sgemm)", f"{n}x{n} f32", mm))
    big = 16 * 1024 * 1024

    def binary(op):
        def make():
            a, b = torch.randn(big), torch.randn(big)
            return (lambda: op(a, b)), 1.0
        return make

    out.append(("add", "16Mi f32", binary(torch.add)))
    out.append(("mul", "16Mi f32", binary(torch.mul)))

    def gelu():
        a = torch.randn(big)
        return (lambda: torch.nn.functional.gelu(a)), 1.0
    out.append(("gelu", "16Mi f32", gelu))

    def add_():
        acc, b = torch.randn(big), torch.randn(big)
        return (lambda: acc.add_(b)), 1.0
    out.append(("add_ (in-place)", "16Mi f32", add_))

    def reduction(op):
        def make():
            x = torch.randn(4096, 1024)
            return (lambda: op(x)), 1.0
        return make
    out.append(("sum (all)", "[4096, 1024] f32", reduction(lambda x: x.sum())))
    out.append(("softmax(dim=1)", "[4096, 1024] f32", reduction(lambda x: torch.softmax(x, 1))))
    out.append(("logsumexp(dim=1)", "[4096, 1024] f32", reduction(lambda x: torch.logsumexp(x, 1))))

    def index_select():
        tab, idx = torch.randn(100000, 16), torch.randint(0, 100000, (1000000,))
        return (lambda: torch.index_select(tab, 0, idx)), 1.0
    out.append(("index_select(dim=0)", "[100k, 16] f32 by 1M i64", index_select))

    def gather():
        src, idx = torch.randn(1000000, 10), torch.randint(0, 10, (1000000, 1))
        return (lambda: torch.gather(src, 1, idx)), 1.0
    out.append(("gather(dim=1)", "[1M, 10] f32 by [1M, 1] i64", gather))

    def volume():
        vol = torch.randn(128, 128, 128)
        xs, ys, zs = (torch.randint(0, 128, (1000000,)) for _ in range(3))
        return vol, xs, ys, zs

    def adv_vec():
        vol, xs, ys, zs = volume()
        return (lambda: vol[xs, ys, zs]), 1.0
    out.append(("adv. index vol[xs, ys, zs]", "1M (x,y,z) i64 in 128^3 f32", adv_vec))

    def adv_loop():
        vol, xs, ys, zs = volume()
        px, py, pz = xs[:10000].tolist(), ys[:10000].tolist(), zs[:10000].tolist()

        def run():
            s = 0.0
            for i in range(10000):
                s += vol[px[i], py[i], pz[i]].item()
            return s
        return run, 100.0
    out.append(("adv. index loop, per point", "1M pts (10k timed, extrapolated)", adv_loop))

    def chain_no_grad():
        x0 = torch.randn(16)

        def run():
            with torch.no_grad():
                return chain(x0)
        return run, 1.0
    out.append(("op chain, no grad", "1000 ops on [16] f32", chain_no_grad))

    def chain_fwd_bwd():
        x = torch.randn(16).requires_grad_()
        return (lambda: chain(x).sum().backward()), 1.0
    out.append(("op chain, fwd+bwd", "1000 ops on [16] f32", chain_fwd_bwd))

    def max_pool(shape, k, s, p):
        def make():
            x = torch.randn(*shape)
            return (lambda: torch.nn.functional.max_pool2d(x, k, s, p)), 1.0
        return make
    for shape, k, s, p in POOL_ROWS:
        out.append(("max_pool2d", pool_size(shape, k, s, p), max_pool(shape, k, s, p)))
    return out


# ops_bench.cc's BenchPooling rows: [N, C, H, W], kernel, stride, padding.
POOL_ROWS = [((64, 6, 8, 8), 2, 2, 0), ((64, 16, 4, 4), 2, 2, 0), ((32, 64, 56, 56), 3, 2, 1),
             ((8, 64, 112, 112), 2, 2, 0)]


def pool_size(shape, k, s, p):
    return f"[{', '.join(str(d) for d in shape)}] f32, k{k} s{s} p{p}"


def main():
    threads, rounds, batch_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    wanted = sys.argv[4] if len(sys.argv) > 4 else ""
    torch.set_num_threads(threads)
    torch.manual_seed(20240601)
    print(f"version\t{torch.__version__.split('+')[0]}", flush=True)
    for op, size, make in rows():
        if wanted and wanted not in op:
            continue
        fn, scale = make()
        print(f"row\t{op}\t{size}\t{timed(fn, rounds, batch_ms, scale):.6g}", flush=True)


if __name__ == "__main__":
    main()
