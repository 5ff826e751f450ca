"""Writes the PyTorch conformance golden files (tests/conformance/golden/*.safetensors).

Each case runs one PyTorch call on fixed inputs and records its inputs, outputs, dtypes,
shapes, the gradients of chosen inputs for a fixed upstream gradient, or the fact that
PyTorch raised. tests/conformance/conformance_test.cc runs the same call in Anvil and
compares. Run with PyTorch 2.x and the `safetensors` package (not needed by `make test`):

    .venv-bench/bin/python tests/conformance/make_golden.py [OUT_DIR]

Layout of a golden file: tensors "<case>/in<i>", "<case>/out<i>", "<case>/gout<i>" (the
upstream gradient of output i), "<case>/grad<i>" (the gradient of input i) and
"<case>/x.<name>" (extra tensors: a module's state dict, an optimizer's gradients); the
safetensors metadata maps "<case>" to a JSON object:
    call       the PyTorch call, as text (what the case is)
    fn, attrs  which Anvil binding runs it, with what options (conformance_test.cc)
    n_in, n_out, requires_grad (input indices; also where PyTorch raised), grad (input
    indices whose gradients were recorded), gout_of (output indices), grad_none (inputs whose
    PyTorch gradient is None), extra (names), raises (PyTorch's message or null),
    rtol, atol
and "__torch__" to the PyTorch version. Files are written whole to a temporary name and
renamed.
"""
import functools
import json
import math
import os
import sys
import warnings
import zlib

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

warnings.filterwarnings("ignore")
torch.use_deterministic_algorithms(True)

F32, F64, I64, I32, I16, I8, U8, BOOL, F16, BF16 = (torch.float32, torch.float64, torch.int64, torch.int32,
                                                    torch.int16, torch.int8, torch.uint8, torch.bool, torch.float16,
                                                    torch.bfloat16)
SPECIAL = [-math.inf, -2.5, -1.0, -0.5, 0.0, 0.5, 1.0, 2.5, math.inf, math.nan]


class Suite:
    def __init__(self):
        self.groups = {}
        self.gen = torch.Generator().manual_seed(1234)

    def randn(self, *shape, dtype=F32):
        return torch.randn(tuple(shape), generator=self.gen, dtype=torch.float64).to(dtype)

    def rand(self, *shape, dtype=F32):
        return torch.rand(tuple(shape), generator=self.gen, dtype=torch.float64).to(dtype)

    def randint(self, low, high, shape, dtype=I64):
        return torch.randint(low, high, tuple(shape), generator=self.gen).to(dtype)

    def case(self, group, name, call, fn, attrs, inputs, run, grad=(), rtol=1e-5, atol=1e-6, extra=None,
             strict=False):
        tensors, meta = self.groups.setdefault(group, ({}, {}))
        assert name not in meta, name
        extra = extra or {}
        ins = [t.detach().clone() for t in inputs]
        for i in grad:
            ins[i].requires_grad_(True)
        raises = None
        outs = []
        try:
            out = run(*ins)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
        except Exception as e:  # noqa: BLE001 - any PyTorch error is a "raises" case
            raises = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        record = {"call": call, "fn": fn, "attrs": attrs, "n_in": len(inputs), "n_out": len(outs), "grad": [],
                  "requires_grad": list(grad),
                  "gout_of": [], "grad_none": [], "extra": sorted(extra), "raises": raises, "rtol": rtol, "atol": atol}
        if strict:
            record["strict"] = True  # tolerances as given for 16-bit floats too, and signed zeros
        for i, t in enumerate(inputs):
            tensors[f"{name}/in{i}"] = t.detach().contiguous().clone()
        for k, t in extra.items():
            tensors[f"{name}/x.{k}"] = t.detach().contiguous().clone()
        if raises is None:
            for i, o in enumerate(outs):
                tensors[f"{name}/out{i}"] = o.detach().contiguous().clone()
            if grad:
                diff = [i for i, o in enumerate(outs) if o.requires_grad and o.dtype.is_floating_point]
                gouts = [self.randn(*outs[i].shape, dtype=outs[i].dtype) for i in diff]
                grads = torch.autograd.grad([outs[i] for i in diff], [ins[i] for i in grad], gouts, allow_unused=True)
                record["gout_of"] = diff
                record["grad"] = list(grad)
                for i, g in zip(diff, gouts):
                    tensors[f"{name}/gout{i}"] = g.contiguous()
                for i, g in zip(grad, grads):
                    if g is None:
                        record["grad_none"].append(i)
                    else:
                        tensors[f"{name}/grad{i}"] = g.detach().contiguous().clone()
        meta[name] = json.dumps(finite_json(record), sort_keys=True, allow_nan=False)

    def write(self, out_dir):
        os.makedirs(out_dir, exist_ok=True)
        total = 0
        for group, (tensors, meta) in sorted(self.groups.items()):
            meta = dict(meta)
            meta["__torch__"] = torch.__version__.split("+")[0]
            path = os.path.join(out_dir, f"{group}.safetensors")
            tmp = path + ".tmp"
            save_file(tensors, tmp, metadata=meta)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
            total += len(meta) - 1
            print(f"{group}: {len(meta) - 1} cases, {os.path.getsize(path)} bytes")
        print(f"total: {total} cases, PyTorch {torch.__version__}")


def finite_json(v):
    """JSON has no inf or NaN: they travel as the strings "inf", "-inf" and "nan"."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: finite_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite_json(x) for x in v]
    return v


def dtype_name(d):
    return str(d).replace("torch.", "")


# ---------------------------------------------------------------- type promotion
def promotion(s):
    pairs = [(F32, F32), (I64, F32), (I32, I64), (BOOL, I64), (BOOL, F32), (U8, I8), (I16, I32), (F32, F64),
             (F16, F32), (BF16, F32), (F16, BF16), (U8, BOOL), (I8, F16), (BF16, I64)]
    ops = ["add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt"]

    def sample(dt, shape):
        if dt == BOOL:
            return s.randint(0, 2, shape).bool()
        if dt.is_floating_point:
            return s.randn(*shape).to(dt)
        return s.randint(1, 5, shape).to(dt)

    for a, b in pairs:
        for op in ops:
            if op == "sub" and BOOL in (a, b):
                continue  # PyTorch refuses bool subtraction; covered below as a raises case
            x, y = sample(a, (3,)), sample(b, (3,))
            s.case("promotion", f"{op}.{dtype_name(a)}.{dtype_name(b)}", f"torch.{op}(a, b)", "binary", {"op": op},
                   [x, y], lambda x, y, op=op: getattr(torch, op)(x, y))
    # 0-dim tensors take part by category only; a dimensioned tensor's dtype wins within it.
    zero_dim = [(I64, F32, (3,), ()), (F64, F32, (), (3,)), (F32, F64, (3,), ()), (I64, I32, (), (3,)),
                (F64, F16, (), (2, 2)), (I64, U8, (), (3,)), (BOOL, I64, (3,), ()), (F32, I64, (), (3,))]
    for a, b, sa, sb in zero_dim:
        for op in ["add", "mul", "div"]:
            x, y = sample(a, sa), sample(b, sb)
            s.case("promotion", f"{op}.0dim.{dtype_name(a)}{list(sa)}.{dtype_name(b)}{list(sb)}",
                   f"torch.{op}(a, b) with shapes {list(sa)}, {list(sb)}", "binary", {"op": op}, [x, y],
                   lambda x, y, op=op: getattr(torch, op)(x, y))
    # Wrapped Python numbers: a float scalar makes an integer tensor float (the default dtype),
    # an int scalar never changes a float tensor's dtype, a bool scalar changes nothing.
    scalars = [("int", 2), ("float", 2.5), ("bool", True), ("float", -0.5), ("int", -3)]
    for dt in [I64, I32, U8, F16, BF16, F32, F64, BOOL]:
        for kind, v in scalars:
            for op in ["add", "mul", "div"]:
                if dt == BOOL and op == "add" and kind == "bool":
                    continue
                x = sample(dt, (3,))
                s.case("promotion", f"{op}.scalar.{dtype_name(dt)}.{kind}{v}", f"torch.{op}(t, {v!r})",
                       "binary_scalar", {"op": op, "scalar": v, "kind": kind}, [x],
                       lambda x, op=op, v=v: getattr(torch, op)(x, v))
    # alpha: an integer tensor refuses a float alpha; a bool tensor refuses subtraction.
    s.case("promotion", "add.alpha_float_int", "torch.add(int_a, int_b, alpha=2.5)", "add_alpha", {"alpha": 2.5,
           "kind": "float"}, [torch.tensor([1, 2]), torch.tensor([3, 4])], lambda x, y: torch.add(x, y, alpha=2.5))
    s.case("promotion", "add.alpha_int_int", "torch.add(int_a, int_b, alpha=2)", "add_alpha", {"alpha": 2,
           "kind": "int"}, [torch.tensor([1, 2]), torch.tensor([3, 4])], lambda x, y: torch.add(x, y, alpha=2))
    s.case("promotion", "add.alpha_float_float", "torch.add(a, b, alpha=2.5)", "add_alpha", {"alpha": 2.5,
           "kind": "float"}, [s.randn(3), s.randn(3)], lambda x, y: torch.add(x, y, alpha=2.5), grad=(0, 1))
    s.case("promotion", "sub.alpha_float_float", "torch.sub(a, b, alpha=0.5)", "sub_alpha", {"alpha": 0.5,
           "kind": "float"}, [s.randn(3), s.randn(3)], lambda x, y: torch.sub(x, y, alpha=0.5), grad=(0, 1))
    s.case("promotion", "sub.bool_bool", "torch.sub(bool_a, bool_b)", "binary", {"op": "sub"},
           [torch.tensor([True, False]), torch.tensor([False, False])], lambda x, y: torch.sub(x, y))
    s.case("promotion", "result_type.i64_0dim_f16", "torch.result_type(int64 [3], float16 0-dim)", "binary",
           {"op": "add"}, [torch.tensor([1, 2, 3]), torch.tensor(0.5, dtype=F16)], lambda x, y: x + y)
    s.case("promotion", "where.f32_i64", "torch.where(c, f32, i64)", "where", {}, [torch.tensor([True, False, True]),
           s.randn(3), torch.tensor([1, 2, 3])], lambda c, x, y: torch.where(c, x, y))
    s.case("promotion", "where.bool_scalar", "torch.where(c, f16, 2.5)", "where_scalar", {"scalar": 2.5},
           [torch.tensor([True, False]), s.randn(2).half()], lambda c, x: torch.where(c, x, 2.5))


# ---------------------------------------------------------------- the op table
@functools.lru_cache(maxsize=None)
def table_rows():
    """The rows of core/ops/op_table.def as dicts of its columns, so that a row the table
    generates an API for (Api FnMethod*, FnDim) gets its cases here without an edit."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "core", "ops", "op_table.def")
    cols = ["id", "name", "kind", "infer", "outs", "grad", "saves", "autocast", "args", "kernel", "api", "onnx", "export"]
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("ANVIL_OP("):
                parts = [p.strip() for p in line.strip()[len("ANVIL_OP("):-1].split(",")]
                rows.append(dict(zip(cols, parts)))
    return tuple(rows)


def torch_fn(name):
    return getattr(torch, name, None) or getattr(F, name)


# ---------------------------------------------------------------- element-wise
ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
               "leaky_relu": lambda x: F.leaky_relu(x, 0.1), "elu": lambda x: F.elu(x, 1.5),
               "softplus": lambda x: F.softplus(x, 2.0, 5.0)}
ACT_ATTRS = {"silu": {}, "gelu": {}, "gelu_tanh": {"approximate": "tanh"}, "leaky_relu": {"slope": 0.1},
             "elu": {"alpha": 1.5}, "softplus": {"beta": 2.0, "threshold": 5.0}}


# The unary rows with a generated function (and square, composed); those with a PyTorch
# activation counterpart of their own are cased with the activations below.
UNARY = [r["name"] for r in table_rows() if r["api"] in ("FnMethodInplace", "FnMethod") and r["name"] not in ACTIVATIONS]
UNARY.append("square")
UNARY_GRAD = {r["name"] for r in table_rows() if r["grad"] == "Yes"} | {"square"}
ZERO_GRAD = {"sign", "floor", "ceil", "round", "trunc"}  # piecewise constant: gradient 0 almost everywhere


def elementwise(s):
    special = torch.tensor(SPECIAL)
    for op in UNARY:
        fn = torch_fn(op)
        diff = op in UNARY_GRAD and op not in ZERO_GRAD
        s.case("elementwise", f"{op}.special", f"torch.{op}(x), x = {SPECIAL}", "unary", {"op": op}, [special],
               fn, grad=(0,) if diff else ())
        s.case("elementwise", f"{op}.random", f"torch.{op}(x), x ~ N(0, 1) [2, 3]", "unary", {"op": op},
               [s.randn(2, 3)], fn, grad=(0,) if diff else ())
        if op not in ("isnan", "isfinite", "logical_not"):
            s.case("elementwise", f"{op}.int64", f"torch.{op}(int64 tensor)", "unary", {"op": op},
                   [torch.tensor([-2, 0, 3])], fn)
        s.case("elementwise", f"{op}.empty", f"torch.{op}(empty [0, 3])", "unary", {"op": op}, [torch.zeros(0, 3)], fn)
    for name, fn in ACTIVATIONS.items():
        s.case("elementwise", f"{name}.special", f"F.{name}(x), x = {SPECIAL}", "activation",
               dict(ACT_ATTRS[name], op=name.replace("_tanh", "")), [special], fn, grad=(0,))
        s.case("elementwise", f"{name}.wide", f"F.{name}(x), x = linspace(-30, 30, 13)", "activation",
               dict(ACT_ATTRS[name], op=name.replace("_tanh", "")), [torch.linspace(-30, 30, 13)], fn, grad=(0,))
    # pow: tensor ** scalar at 0 and negatives (its gradient at 0).
    for e in [2.0, 0.5, -1.0, 0.0, 3.0, 1.5]:
        s.case("elementwise", f"pow.scalar{e}", f"torch.pow(x, {e})", "pow_scalar", {"exponent": e},
               [torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0])], lambda x, e=e: torch.pow(x, e), grad=(0,))
    s.case("elementwise", "pow.int_int", "torch.pow(int64, 2)", "pow_scalar", {"exponent": 2, "kind": "int"},
           [torch.tensor([-3, 0, 4])], lambda x: torch.pow(x, 2))
    s.case("elementwise", "pow.tensor", "torch.pow(a, b)", "binary", {"op": "pow"},
           [torch.tensor([0.0, 0.5, 2.0, 3.0]), torch.tensor([2.0, 0.0, -1.0, 0.5])], torch.pow, grad=(0, 1))
    # clamp: gradient exactly at the bounds (0 for scalar bounds, 0.5 for tensor bounds).
    x = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0, math.nan])
    for lo, hi in [(-1.0, 1.0), (None, 1.0), (-1.0, None), (1.0, -1.0)]:
        s.case("elementwise", f"clamp.{lo}.{hi}", f"torch.clamp(x, {lo}, {hi})", "clamp", {"min": lo, "max": hi},
               [x], lambda x, lo=lo, hi=hi: torch.clamp(x, lo, hi), grad=(0,))
    s.case("elementwise", "clamp.tensor_bounds", "torch.clamp(x, min=t_lo, max=t_hi)", "clamp_tensor", {},
           [x, torch.full((6,), -1.0), torch.full((6,), 1.0)], lambda x, a, b: torch.clamp(x, a, b), grad=(0, 1, 2))
    s.case("elementwise", "clamp.tensor_min_only", "torch.clamp(x, min=t_lo)", "clamp_tensor", {"max": False},
           [x, torch.full((6,), -1.0)], lambda x, a: torch.clamp(x, min=a), grad=(0, 1))
    s.case("elementwise", "clamp.tensor_max_only", "torch.clamp(x, max=t_hi)", "clamp_tensor", {"min": False},
           [x, torch.full((6,), 1.0)], lambda x, b: torch.clamp(x, max=b), grad=(0, 1))
    s.case("elementwise", "clamp.tensor_crossed_and_equal",
           "torch.clamp(x, lo, hi) with lo > hi, and x == lo == hi", "clamp_tensor", {},
           [torch.tensor([0.0, 1.0, 2.0, 1.0]), torch.tensor([1.0, 1.0, 3.0, 0.5]), torch.tensor([0.5, 1.0, 2.5, 2.0])],
           lambda x, a, b: torch.clamp(x, a, b), grad=(0, 1, 2))
    s.case("elementwise", "clamp.int", "torch.clamp(int64, 0, 2)", "clamp", {"min": 0, "max": 2, "kind": "int"},
           [torch.tensor([-3, 1, 5])], lambda x: torch.clamp(x, 0, 2))
    # binary ops' gradients: ties and NaNs for maximum/minimum, zeros for div and atan2.
    a = torch.tensor([1.0, math.nan, 2.0, 3.0, -1.0])
    b = torch.tensor([1.0, 1.0, math.nan, 2.0, 4.0])
    for op in ["maximum", "minimum", "fmax", "fmin"]:
        s.case("elementwise", f"{op}.ties_nan", f"torch.{op}(a, b) with ties and NaN", "binary", {"op": op}, [a, b],
               getattr(torch, op), grad=(0, 1))
    for op in ["add", "sub", "mul", "div", "atan2", "remainder", "fmod", "floor_divide"]:
        x, y = s.randn(2, 3), s.randn(3)
        diff = (0, 1) if op not in ("floor_divide",) else ()
        s.case("elementwise", f"{op}.broadcast", f"torch.{op}(a [2, 3], b [3])", "binary", {"op": op}, [x, y],
               getattr(torch, op), grad=diff)
    ints = (torch.tensor([7, -7, 7, -7, 0]), torch.tensor([2, 2, -2, -2, 3]))
    for op in ["remainder", "fmod", "floor_divide", "div"]:
        s.case("elementwise", f"{op}.int_signs", f"torch.{op}(int a, int b) over the signs", "binary", {"op": op},
               list(ints), getattr(torch, op))
    fl = (torch.tensor([7.5, -7.5, 7.5, -7.5, 0.0, 1.0]), torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 0.0]))
    for mode in ["trunc", "floor"]:
        s.case("elementwise", f"div.{mode}.float", f"torch.div(a, b, rounding_mode='{mode}')", "div_mode",
               {"mode": mode}, list(fl), lambda x, y, m=mode: torch.div(x, y, rounding_mode=m))
        s.case("elementwise", f"div.{mode}.int", f"torch.div(int a, int b, rounding_mode='{mode}')", "div_mode",
               {"mode": mode}, list(ints), lambda x, y, m=mode: torch.div(x, y, rounding_mode=m))
    s.case("elementwise", "div.int_by_zero", "torch.div(int a, 0) (true division: inf/nan)", "binary", {"op": "div"},
           [torch.tensor([1, 0, -1]), torch.tensor([0, 0, 0])], torch.div)
    s.case("elementwise", "div.float_by_zero", "torch.div(a, 0.)", "binary", {"op": "div"},
           [torch.tensor([1.0, 0.0, -1.0]), torch.tensor([0.0, 0.0, 0.0])], torch.div, grad=(0, 1))
    for op in ["logical_and", "logical_or", "logical_xor", "eq", "ne", "lt", "le", "gt", "ge"]:
        s.case("elementwise", f"{op}.nan", f"torch.{op}(a, b) with NaN", "binary", {"op": op}, [a, b],
               getattr(torch, op))
    s.case("elementwise", "where.grad", "torch.where(c, a, b)", "where", {},
           [torch.tensor([True, False, True]), s.randn(3), s.randn(3)], torch.where, grad=(1, 2))
    s.case("elementwise", "lerp", "torch.lerp(a, b, 0.3)", "lerp", {"weight": 0.3}, [s.randn(4), s.randn(4)],
           lambda x, y: torch.lerp(x, y, 0.3), grad=(0, 1))
    s.case("elementwise", "addcmul", "torch.addcmul(a, b, c, value=0.5)", "addcmul", {"value": 0.5},
           [s.randn(4), s.randn(4), s.randn(4)], lambda x, y, z: torch.addcmul(x, y, z, value=0.5), grad=(0, 1, 2))
    s.case("elementwise", "addcdiv", "torch.addcdiv(a, b, c, value=0.5)", "addcdiv", {"value": 0.5},
           [s.randn(4), s.randn(4), s.rand(4) + 0.5], lambda x, y, z: torch.addcdiv(x, y, z, value=0.5), grad=(0, 1, 2))
    for dt in [I64, F64, F16, BF16, BOOL]:
        s.case("elementwise", f"to.f32.{dtype_name(dt)}", f"x.to({dtype_name(dt)})", "to", {"dtype": dtype_name(dt)},
               [torch.tensor([-1.7, -0.5, 0.0, 0.5, 2.6, 300.25])], lambda x, dt=dt: x.to(dt))
    s.case("elementwise", "to.grad", "x.to(float64)", "to", {"dtype": "float64"}, [s.randn(3)],
           lambda x: x.to(F64), grad=(0,))


# ---------------------------------------------------------------- reductions
# ---------------------------------------------------------------- classes of input
# Each sweep runs over every row it applies to (the unary rows come from core/ops/op_table.def),
# so a row added to the table gets them with no new code. Compared strictly: tolerances as given
# for 16-bit floats too, and the sign of every zero.
F32_EDGES = [0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754944e-38, -1.1754944e-38, 1e-20, -1e-20, 0.5, -0.5,
             88.3, 88.5, 88.72, 89.0, -87.5, -88.5, -100.0, -103.9, -104.0, 1e10, -1e10, 3.4e38, -3.4e38]


def float_classes(s):
    edges = torch.tensor(F32_EDGES, dtype=F32)
    for op in UNARY:
        s.case("float_classes", f"{op}.edges", f"torch.{op}(x), x at float32's edges (+-0, subnormal, exp's range, "
               f"huge): {F32_EDGES}", "unary", {"op": op}, [edges], torch_fn(op), rtol=1e-5, atol=3e-45, strict=True)
    # The scalar exponents PyTorch's pow maps to other operations (sqrt, rsqrt, reciprocal,
    # products), at the inputs where they differ from std::pow.
    for e in [2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.0, 0.0, 1.5, -1.5]:
        x = torch.tensor([-math.inf, -2.0, -1e-45, -0.0, 0.0, 1e-45, 2.0, math.inf, math.nan])
        s.case("float_classes", f"pow.exponent{e}", f"torch.pow(x, {e}) at -inf, -0, subnormals, NaN", "pow_scalar",
               {"exponent": e}, [x], lambda x, e=e: torch.pow(x, e), rtol=1e-6, atol=0, strict=True)
    # A Python number with a float16 / bfloat16 tensor: PyTorch computes in float32 with the
    # number unrounded to the tensor's dtype; in place too.
    for dt in (F16, BF16):
        for op in ["add", "sub", "mul", "div"]:
            for v in (0.1, 1.0 / 3.0, -2.7):
                x = s.randn(257, dtype=dt)
                s.case("float_classes", f"{op}.{dtype_name(dt)}.number{v:.4f}", f"torch.{op}({dtype_name(dt)} x, {v!r})",
                       "binary_scalar", {"op": op, "scalar": v, "kind": "float"}, [x],
                       lambda x, op=op, v=v: getattr(torch, op)(x, v), rtol=0, atol=0, strict=True)
                s.case("float_classes", f"{op}_.{dtype_name(dt)}.number{v:.4f}", f"x.{op}_({v!r}), x {dtype_name(dt)}",
                       "binary_scalar_", {"op": op, "scalar": v, "kind": "float"}, [x],
                       lambda x, op=op, v=v: getattr(x.clone(), op + "_")(v), rtol=0, atol=0, strict=True)
    # NaN through the scalar arguments: a NaN bound makes every element NaN.
    x = torch.tensor([-2.0, -0.0, 0.0, 1.0, math.inf, math.nan])
    for lo, hi in [(math.nan, None), (None, math.nan), (math.nan, 1.0), (-1.0, math.nan), (math.nan, math.nan)]:
        s.case("float_classes", f"clamp.nan_bound.{lo}.{hi}", f"torch.clamp(x, {lo}, {hi})", "clamp",
               {"min": lo, "max": hi}, [x], lambda x, lo=lo, hi=hi: torch.clamp(x, lo, hi), strict=True)
    for op in ["add", "sub", "mul", "div"]:
        s.case("float_classes", f"{op}.nan_number", f"torch.{op}(x, nan)", "binary_scalar",
               {"op": op, "scalar": math.nan, "kind": "float"}, [x], lambda x, op=op: getattr(torch, op)(x, math.nan),
               strict=True)


# ---------------------------------------------------------------- corners
# Corners of gradients, clipping and schedules where Anvil differed from PyTorch.
def corners(s):
    # norm's gradient at zero entries for p < 1 and 1 < p < 2: 0 there (|0|^(p-1) is inf).
    x = torch.tensor([[0.0, 1.5, -2.0, 0.0], [0.5, 0.0, -0.25, 3.0]])
    for p in [0.5, 0.3, 1.5, 0.0]:
        for dim in [None, [1]]:
            attrs = {"op": "norm", "p": p, "dim": dim, "keepdim": False}
            s.case("corners", f"norm.p{p}.zero_entries.d{dim}", f"torch.linalg.vector_norm(x, {p}, dim={dim}), "
                   "x with zero entries", "reduce", attrs, [x],
                   lambda x, p=p, dim=dim: torch.linalg.vector_norm(x, ord=p, dim=None if dim is None else tuple(dim)),
                   grad=(0,))
    # clip_grad_norm_ with a non-finite norm and error_if_nonfinite=False: it still scales (by
    # 0 for inf, so inf -> NaN and the finite ones -> 0; by NaN for NaN).
    for name, bad in [("inf", math.inf), ("nan", math.nan)]:
        for norm_type in [2.0, math.inf]:
            g1, g2 = torch.tensor([3.0, -4.0]), torch.tensor([bad, 1.0, 0.0])

            def clip(a, b, norm_type=norm_type):
                p1, p2 = torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)
                p1.grad, p2.grad = a.clone(), b.clone()
                total = torch.nn.utils.clip_grad_norm_([p1, p2], 1.0, norm_type, error_if_nonfinite=False)
                return total.reshape(1).to(F64), p1.grad, p2.grad
            s.case("corners", f"clip_grad_norm.{name}.p{norm_type}", f"clip_grad_norm_(grads with {name}, 1.0, "
                   f"{norm_type}, error_if_nonfinite=False)", "clip_grad_norm", {"max_norm": 1.0,
                                                                                 "norm_type": norm_type},
                   [g1, g2], clip, strict=True)
    # MultiStepLR with unsorted and repeated milestones (a repeat multiplies by gamma twice).
    S = torch.optim.lr_scheduler
    for ms in ([12, 5, 30], [5, 12, 12, 30], [30, 5, 5, 5]):
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.1)
        sch = S.MultiStepLR(opt, ms, 0.3)
        lrs, moms = [], []
        for _ in range(40):
            lrs.append(opt.param_groups[0]["lr"])
            moms.append(0.0)
            opt.step()
            sch.step()
        s.case("corners", f"MultiStepLR.{'_'.join(map(str, ms))}", f"MultiStepLR(SGD(lr=0.1), {ms}, 0.3), 40 steps",
               "sched", {"type": "MultiStepLR", "options": {"milestones": ms, "gamma": 0.3}, "steps": 40,
                         "momentum": None}, [],
               lambda l=torch.tensor(lrs, dtype=F64), m=torch.tensor(moms, dtype=F64): (l, m), rtol=1e-12, atol=0)
    # ReduceLROnPlateau: eps (a reduction smaller than eps is not made), threshold_mode='abs',
    # and a min_lr per parameter group.
    flat = [1.0] * 120
    noisy = [1.0 / (1 + t) if t < 10 else 0.09 + 0.004 * ((t * 7) % 5) for t in range(60)]
    configs = [("eps", flat, {"factor": 0.1, "patience": 0, "eps": 1e-8}),
               ("eps_large", flat, {"factor": 0.5, "patience": 1, "eps": 0.01}),
               ("abs", noisy, {"factor": 0.5, "patience": 2, "threshold": 0.01, "threshold_mode": "abs"}),
               ("abs_max", [-v for v in noisy], {"mode": "max", "factor": 0.5, "patience": 2, "threshold": 0.01,
                                                  "threshold_mode": "abs"}),
               ("min_lr_per_group", flat, {"factor": 0.5, "patience": 1, "min_lr": [0.01, 0.03]})]
    for name, metrics, opts in configs:
        def plateau(m, opts=opts):
            groups = len(opts["min_lr"]) if isinstance(opts.get("min_lr"), list) else 1
            ps = [torch.zeros(1, requires_grad=True) for _ in range(groups)]
            opt = torch.optim.SGD([{"params": [q]} for q in ps], lr=0.1)
            sch = S.ReduceLROnPlateau(opt, **opts)
            lrs = []
            for v in m.tolist():
                opt.step()
                sch.step(v)
                lrs.extend(g["lr"] for g in opt.param_groups)
            return torch.tensor(lrs, dtype=F64)
        s.case("corners", f"ReduceLROnPlateau.{name}", f"ReduceLROnPlateau(SGD(lr=0.1), {opts}) over {len(metrics)} "
               "metrics", "plateau2", opts, [torch.tensor(metrics, dtype=F64)], plateau, rtol=1e-12, atol=0)


# ---------------------------------------------------------------- round two's additions
def additions(s):
    reds = ["none", "mean", "sum"]
    x, y = s.randn(5), torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    xb = torch.tensor([0.0, 50.0, -50.0, 100.0, -100.0])
    for red in reds:
        s.case("additions", f"soft_margin_loss.{red}", f"F.soft_margin_loss(x, y, reduction='{red}')", "loss",
               {"op": "soft_margin_loss", "reduction": red}, [x, y],
               lambda a, b, red=red: F.soft_margin_loss(a, b, reduction=red), grad=(0,))
    s.case("additions", "soft_margin_loss.large", "F.soft_margin_loss(x, y, 'sum') at |x| up to 100", "loss",
           {"op": "soft_margin_loss", "reduction": "none"}, [xb, y],
           lambda a, b: F.soft_margin_loss(a, b, reduction="none"), grad=(0,))
    a1, a2 = s.randn(4, 6), s.randn(4, 6)
    a2[2] = a1[2]  # cos = 1
    yc = torch.tensor([1.0, -1.0, 1.0, -1.0])
    for red in reds:
        for margin in [0.0, 0.2, -0.3]:
            s.case("additions", f"cosine_embedding_loss.{red}.m{margin}",
                   f"F.cosine_embedding_loss(x1, x2, y, margin={margin}, reduction='{red}')", "loss",
                   {"op": "cosine_embedding_loss", "reduction": red, "margin": margin}, [a1, a2, yc],
                   lambda a, b, c, red=red, margin=margin: F.cosine_embedding_loss(a, b, c, margin=margin,
                                                                                   reduction=red), grad=(0, 1))
    s.case("additions", "cosine_embedding_loss.1d", "F.cosine_embedding_loss(x1 [6], x2 [6], y [])", "loss",
           {"op": "cosine_embedding_loss", "reduction": "mean"}, [s.randn(6), s.randn(6), torch.tensor(-1.0)],
           lambda a, b, c: F.cosine_embedding_loss(a, b, c), grad=(0, 1))
    m1, m2 = s.randn(6), s.randn(6)
    m2[0] = m1[0]  # at the hinge
    ym = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    for red in reds:
        for margin in [0.0, 0.5]:
            s.case("additions", f"margin_ranking_loss.{red}.m{margin}",
                   f"F.margin_ranking_loss(x1, x2, y, margin={margin}, reduction='{red}')", "loss",
                   {"op": "margin_ranking_loss", "reduction": red, "margin": margin}, [m1, m2, ym],
                   lambda a, b, c, red=red, margin=margin: F.margin_ranking_loss(a, b, c, margin=margin,
                                                                                 reduction=red), grad=(0, 1, 2))
    rate = s.randn(2, 4)
    counts = torch.tensor([[0.0, 1.0, 2.0, 5.0], [3.0, 0.0, 1.0, 10.0]])
    for log_input in [True, False]:
        for full in [False, True]:
            for red in reds:
                inp = rate if log_input else rate.abs() + 0.1
                s.case("additions", f"poisson_nll_loss.log{int(log_input)}.full{int(full)}.{red}",
                       f"F.poisson_nll_loss(x, t, log_input={log_input}, full={full}, reduction='{red}')", "loss",
                       {"op": "poisson_nll_loss", "reduction": red, "log_input": log_input, "full": full}, [inp, counts],
                       lambda a, b, li=log_input, fu=full, red=red: F.poisson_nll_loss(a, b, log_input=li, full=fu,
                                                                                       reduction=red), grad=(0,))
    # CosineAnnealingWarmRestarts and LambdaLR: the rate before each of 60 steps.
    S = torch.optim.lr_scheduler
    for kind, opts, make in [
            ("CosineAnnealingWarmRestarts", {"T_0": 10}, lambda o: S.CosineAnnealingWarmRestarts(o, 10)),
            ("CosineAnnealingWarmRestarts", {"T_0": 5, "T_mult": 2, "eta_min": 0.01},
             lambda o: S.CosineAnnealingWarmRestarts(o, 5, T_mult=2, eta_min=0.01)),
            ("CosineAnnealingWarmRestarts", {"T_0": 3, "T_mult": 3, "eta_min": 0.001},
             lambda o: S.CosineAnnealingWarmRestarts(o, 3, T_mult=3, eta_min=0.001)),
            ("LambdaLR", {"lambda": "0.95**t"}, lambda o: S.LambdaLR(o, lambda t: 0.95 ** t)),
            ("LambdaLR", {"lambda": "warmup5"}, lambda o: S.LambdaLR(o, lambda t: min(1.0, (t + 1) / 5.0))),
            ("LinearLR", {}, lambda o: S.LinearLR(o)),
            ("LinearLR", {"start_factor": 0.25, "end_factor": 0.5, "total_iters": 20},
             lambda o: S.LinearLR(o, 0.25, 0.5, 20)),
            ("LinearLR", {"start_factor": 1.0, "end_factor": 0.1, "total_iters": 30},
             lambda o: S.LinearLR(o, 1.0, 0.1, 30)),
            ("ConstantLR", {}, lambda o: S.ConstantLR(o)),
            ("ConstantLR", {"factor": 0.5, "total_iters": 12}, lambda o: S.ConstantLR(o, 0.5, 12)),
            ("PolynomialLR", {}, lambda o: S.PolynomialLR(o)),
            ("PolynomialLR", {"total_iters": 40, "power": 2.0}, lambda o: S.PolynomialLR(o, 40, 2.0)),
            ("PolynomialLR", {"total_iters": 25, "power": 0.5}, lambda o: S.PolynomialLR(o, 25, 0.5))]:
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.1)
        sch = make(opt)
        lrs = []
        for _ in range(60):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sch.step()
        name = kind + "." + ".".join(f"{k}{v}" for k, v in sorted(opts.items()))
        s.case("additions", name, f"{kind}(SGD(lr=0.1), {opts}), 60 steps", "sched",
               {"type": kind, "options": opts, "steps": 60, "momentum": None}, [],
               lambda l=torch.tensor(lrs, dtype=F64): (l, torch.zeros(60, dtype=F64)), rtol=1e-12, atol=1e-15)
    # Adam and AdamW with maximize: the gradient's sign flipped before the update.
    optimizer_cases(s, "additions", [("Adam", {"lr": 0.01, "maximize": True}),
                                     ("Adam", {"lr": 0.01, "maximize": True, "amsgrad": True, "weight_decay": 0.1}),
                                     ("AdamW", {"lr": 0.01, "maximize": True, "weight_decay": 0.1})])


def reductions(s):
    def run(op, attrs):
        dim, keep = attrs.get("dim"), attrs.get("keepdim", False)

        def f(x):
            if op in ("sum", "mean", "prod", "amax", "amin", "logsumexp", "all", "any"):
                fn = getattr(torch, op)
                if dim is None:
                    if op == "logsumexp":
                        return torch.logsumexp(x, dim=tuple(range(x.dim())))
                    if op in ("amax", "amin"):
                        return fn(x)
                    return fn(x)
                if op == "prod":
                    return torch.prod(x, dim[0], keepdim=keep)
                if op in ("all", "any"):
                    return fn(x, dim=tuple(dim), keepdim=keep)
                return fn(x, dim=tuple(dim), keepdim=keep)
            if op in ("var", "std"):
                c = attrs.get("correction", 1)
                return getattr(torch, op)(x, dim=None if dim is None else tuple(dim), correction=c, keepdim=keep)
            if op == "norm":
                return torch.linalg.vector_norm(x, ord=attrs["p"], dim=None if dim is None else tuple(dim),
                                                keepdim=keep)
            if op in ("argmax", "argmin"):
                return getattr(torch, op)(x, dim=None if dim is None else dim[0], keepdim=keep)
            if op in ("max_dim", "min_dim"):
                r = getattr(torch, op[:3])(x, dim[0], keepdim=keep)
                return r.values, r.indices
            if op in ("max_all", "min_all"):
                return getattr(torch, op[:3])(x)
            if op == "cumsum":
                return torch.cumsum(x, dim[0])
            raise ValueError(op)
        return f

    float_ops = ["sum", "mean", "prod", "amax", "amin", "logsumexp", "var", "std", "norm2", "norm1", "norminf",
                 "normninf", "norm0", "norm3", "argmax", "argmin", "max_dim", "min_dim", "max_all", "min_all",
                 "cumsum", "all", "any"]
    inputs = {
        "random": s.randn(3, 4),
        "nan": torch.tensor([[1.0, math.nan, 3.0, 0.5], [2.0, -1.0, 4.0, -3.0], [math.nan, 1.0, 2.0, 3.0]]),
        "inf": torch.tensor([[1.0, math.inf, 3.0, 0.5], [-math.inf, -1.0, 4.0, -3.0], [0.0, 1.0, 2.0, 3.0]]),
        "zeros": torch.tensor([[2.0, 0.0, 3.0, 1.0], [0.0, 0.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]]),
        "ties": torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, -1.0, 2.0], [5.0, 5.0, 5.0, 5.0]]),
        "empty": torch.zeros(0, 4),
    }
    for op in float_ops:
        base, p = op, None
        attrs_base = {}
        if op.startswith("norm"):
            base = "norm"
            p = {"norm2": 2.0, "norm1": 1.0, "norminf": math.inf, "normninf": -math.inf, "norm0": 0.0,
                 "norm3": 3.0}[op]
            attrs_base["p"] = p
        for iname, x in inputs.items():
            dims = [None, [1], [0]]
            if base in ("var", "std", "sum", "mean", "amax", "logsumexp"):
                dims.append([0, 1])
            if base in ("max_dim", "min_dim", "cumsum"):
                dims = [[1], [0]]
            if base in ("max_all", "min_all"):
                dims = [None]
            for dim in dims:
                for keep in ([False, True] if dim is not None and base not in ("cumsum",) else [False]):
                    attrs = dict(attrs_base, op=base, dim=dim, keepdim=keep)
                    if base in ("var", "std"):
                        for c in [0, 1, 2]:
                            a2 = dict(attrs, correction=c)
                            s.case("reductions", f"{op}.{iname}.d{dim}.k{int(keep)}.c{c}",
                                   f"torch.{base}(x[{iname}], dim={dim}, correction={c}, keepdim={keep})", "reduce",
                                   a2, [x], run(base, a2), grad=(0,))
                        continue
                    diff = base not in ("argmax", "argmin", "all", "any")
                    call = f"torch.{base}(x[{iname}], dim={dim}, keepdim={keep}{', p=' + str(p) if p is not None else ''})"
                    s.case("reductions", f"{op}.{iname}.d{dim}.k{int(keep)}", call, "reduce", attrs, [x],
                           run(base, attrs), grad=(0,) if diff else ())
    # The rows with a generated (x, dim) function (Api FnDim in the table): every input above
    # along both dims, a 0-dim and an int64 tensor.
    for row in [r for r in table_rows() if r["api"] == "FnDim"]:
        name = row["name"]
        for iname, x in dict(inputs, scalar=torch.tensor(1.5), int64=torch.tensor([[1, 2], [3, 4]])).items():
            for dim in ([0] if x.dim() == 0 else [1, 0, -1]):
                diff = row["grad"] == "Yes" and x.dtype.is_floating_point
                s.case("reductions", f"{name}.{iname}.d{dim}", f"torch.{name}(x[{iname}], {dim})", "dim_op",
                       {"op": name, "dim": dim}, [x], lambda t, d=dim, f=torch_fn(name): f(t, d),
                       grad=(0,) if diff else ())
    # integer and bool inputs: sum/prod promote to int64, mean refuses.
    for dt in [I32, U8, BOOL, I64]:
        x = s.randint(0, 3, (2, 3)).to(dt)
        for op in ["sum", "prod", "mean", "amax", "cumsum"]:
            attrs = {"op": op, "dim": [1] if op in ("cumsum", "prod") else None, "keepdim": False}
            s.case("reductions", f"{op}.{dtype_name(dt)}", f"torch.{op}({dtype_name(dt)} tensor)", "reduce", attrs,
                   [x], run(op, attrs))
    # prod with zeros: the gradient is the product of the others.
    for name, v in [("one_zero", [2.0, 0.0, 3.0]), ("two_zeros", [0.0, 0.0, 3.0]), ("no_zero", [2.0, -1.5, 3.0])]:
        attrs = {"op": "prod", "dim": None, "keepdim": False}
        s.case("reductions", f"prod.grad.{name}", f"torch.prod({v})", "reduce", attrs, [torch.tensor(v)],
               run("prod", attrs), grad=(0,))
        attrs = {"op": "prod", "dim": [1], "keepdim": False}
        s.case("reductions", f"prod.grad_dim.{name}", f"torch.prod([{v}, {v[::-1]}], dim=1)", "reduce", attrs,
               [torch.tensor([v, v[::-1]])], run("prod", attrs), grad=(0,))
    s.case("reductions", "sum.dtype_f64", "torch.sum(f32, dtype=float64)", "sum_dtype", {"dtype": "float64"},
           [s.randn(5)], lambda x: torch.sum(x, dtype=F64), grad=(0,))
    s.case("reductions", "mean.int_raises", "torch.mean(int64 tensor)", "reduce", {"op": "mean", "dim": None,
           "keepdim": False}, [torch.tensor([1, 2])], lambda x: torch.mean(x))


# ---------------------------------------------------------------- losses
def losses(s):
    reductions_ = ["none", "mean", "sum"]
    x, t = s.randn(4, 3), s.randn(4, 3)
    for red in reductions_:
        for name, fn, extra in [("mse_loss", F.mse_loss, {}), ("l1_loss", F.l1_loss, {}),
                                ("smooth_l1_loss", F.smooth_l1_loss, {"beta": 0.5}),
                                ("huber_loss", F.huber_loss, {"delta": 0.5})]:
            s.case("losses", f"{name}.{red}", f"F.{name}(x, t, reduction='{red}', {extra})", "loss",
                   dict(extra, op=name, reduction=red), [x, t], lambda a, b, fn=fn, red=red, extra=extra:
                   fn(a, b, reduction=red, **extra), grad=(0, 1))
    # boundary points: equal input and target (|d| = 0, the kink of l1/smooth_l1/huber), +-1, +-inf
    xb = torch.tensor([0.0, 1.0, -1.0, 0.5, 2.0, math.inf])
    tb = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.5, 0.0])
    for name, fn, extra in [("mse_loss", F.mse_loss, {}), ("l1_loss", F.l1_loss, {}),
                            ("smooth_l1_loss", F.smooth_l1_loss, {"beta": 1.0}),
                            ("huber_loss", F.huber_loss, {"delta": 1.0}),
                            ("smooth_l1_loss_beta0", F.smooth_l1_loss, {"beta": 0.0})]:
        op = name.replace("_beta0", "")
        s.case("losses", f"{name}.boundary", f"F.{op}(x, t, reduction='sum', {extra}) at |x - t| in {{0, 0.5, 1, 2}}, inf",
               "loss", dict(extra, op=op, reduction="sum"), [xb, tb],
               lambda a, b, fn=fn, extra=extra: fn(a, b, reduction="sum", **extra), grad=(0, 1))
    s.case("losses", "mse_loss.broadcast", "F.mse_loss(x [4, 3], t [3]) (PyTorch warns and broadcasts)", "loss",
           {"op": "mse_loss", "reduction": "mean"}, [s.randn(4, 3), s.randn(3)], lambda a, b: F.mse_loss(a, b),
           grad=(0,))
    # binary cross-entropy: probabilities at 0 and 1, with and without weights.
    p = torch.tensor([0.0, 1.0, 0.5, 0.2, 1.0, 0.0, 0.999])
    y = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.3])
    w = torch.tensor([1.0, 2.0, 0.5, 1.0, 1.0, 1.0, 3.0])
    for red in reductions_:
        s.case("losses", f"bce.boundary.{red}", f"F.binary_cross_entropy(p, y, reduction='{red}') at p in {{0, 1}}",
               "bce", {"reduction": red}, [p, y], lambda a, b, red=red: F.binary_cross_entropy(a, b, reduction=red),
               grad=(0,))
        s.case("losses", f"bce.weight.{red}", f"F.binary_cross_entropy(p, y, weight=w, reduction='{red}')",
               "bce", {"reduction": red, "weight": True}, [p, y, w],
               lambda a, b, c, red=red: F.binary_cross_entropy(a, b, weight=c, reduction=red), grad=(0,))
    s.case("losses", "bce.outside_raises", "F.binary_cross_entropy(1.5, 1)", "bce", {"reduction": "mean"},
           [torch.tensor([1.5]), torch.tensor([1.0])], lambda a, b: F.binary_cross_entropy(a, b))
    # with logits: 0, +-1, +-30 and +-inf logits; weight and pos_weight.
    z = torch.tensor([0.0, 0.0, 0.0, 1.0, -1.0, 30.0, -30.0, 100.0])
    yz = torch.tensor([0.0, 1.0, 0.3, 1.0, 0.0, 0.0, 1.0, 1.0])
    wz = torch.linspace(0.5, 2.0, 8)
    pw = torch.tensor([2.0])
    for red in reductions_:
        s.case("losses", f"bce_logits.{red}", f"F.binary_cross_entropy_with_logits(z, y, reduction='{red}')",
               "bce_logits", {"reduction": red}, [z, yz],
               lambda a, b, red=red: F.binary_cross_entropy_with_logits(a, b, reduction=red), grad=(0, 1))
        s.case("losses", f"bce_logits.pos_weight.{red}",
               f"F.binary_cross_entropy_with_logits(z, y, pos_weight=[2.], reduction='{red}')", "bce_logits",
               {"reduction": red, "pos_weight": True}, [z, yz, pw],
               lambda a, b, c, red=red: F.binary_cross_entropy_with_logits(a, b, pos_weight=c, reduction=red),
               grad=(0, 1))
        s.case("losses", f"bce_logits.weight.{red}",
               f"F.binary_cross_entropy_with_logits(z, y, weight=w, reduction='{red}')", "bce_logits",
               {"reduction": red, "weight": True}, [z, yz, wz],
               lambda a, b, c, red=red: F.binary_cross_entropy_with_logits(a, b, weight=c, reduction=red), grad=(0,))
    s.case("losses", "bce_logits.zeros_sum", "F.binary_cross_entropy_with_logits(zeros(3), [0, 1, .3], 'sum')",
           "bce_logits", {"reduction": "sum"}, [torch.zeros(3), torch.tensor([0.0, 1.0, 0.3])],
           lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="sum"), grad=(0,))
    # cross-entropy and nll: class weights, ignore_index, label smoothing, every reduction.
    logits = s.randn(5, 4)
    target = torch.tensor([0, 3, 1, 3, 2])
    target_ign = torch.tensor([0, -100, 1, 3, -100])
    cw = torch.tensor([1.0, 2.0, 0.5, 1.5])
    for red in reductions_:
        for ls in [0.0, 0.2]:
            for weighted in [False, True]:
                for tname, tt in [("plain", target), ("ignore", target_ign)]:
                    ins = [logits, tt] + ([cw] if weighted else [])
                    attrs = {"reduction": red, "label_smoothing": ls, "weight": weighted}

                    def ce(a, b, c=None, red=red, ls=ls):
                        return F.cross_entropy(a, b, weight=c, reduction=red, label_smoothing=ls)
                    s.case("losses", f"cross_entropy.{red}.ls{ls}.w{int(weighted)}.{tname}",
                           f"F.cross_entropy(logits, {tname} targets, weight={'w' if weighted else None}, "
                           f"reduction='{red}', label_smoothing={ls})", "cross_entropy", attrs, ins, ce, grad=(0,))
            lp = F.log_softmax(logits, 1)
        for weighted in [False, True]:
            ins = [lp, target_ign] + ([cw] if weighted else [])
            s.case("losses", f"nll_loss.{red}.w{int(weighted)}", f"F.nll_loss(logp, targets, reduction='{red}')",
                   "nll_loss", {"reduction": red, "weight": weighted}, ins,
                   lambda a, b, c=None, red=red: F.nll_loss(a, b, weight=c, reduction=red), grad=(0,))
    s.case("losses", "cross_entropy.all_ignored_mean", "F.cross_entropy(x, all -100) (0/0: nan)", "cross_entropy",
           {"reduction": "mean", "label_smoothing": 0.0, "weight": False}, [logits, torch.full((5,), -100)],
           lambda a, b: F.cross_entropy(a, b), grad=(0,))
    s.case("losses", "cross_entropy.probs", "F.cross_entropy(x, class probabilities)", "cross_entropy",
           {"reduction": "mean", "label_smoothing": 0.0, "weight": False}, [logits, F.softmax(s.randn(5, 4), 1)],
           lambda a, b: F.cross_entropy(a, b), grad=(0,))
    s.case("losses", "cross_entropy.target_out_of_range", "F.cross_entropy(x, target 7 of 4 classes)",
           "cross_entropy", {"reduction": "mean", "label_smoothing": 0.0, "weight": False},
           [logits, torch.tensor([0, 7, 1, 2, 3])], lambda a, b: F.cross_entropy(a, b))
    # kl_div
    inp = F.log_softmax(s.randn(3, 4), 1)
    tgt = F.softmax(s.randn(3, 4), 1)
    tgt0 = torch.tensor([[0.0, 0.5, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    for red in ["none", "sum", "mean", "batchmean"]:
        for lt in [False, True]:
            tt = tgt.log() if lt else tgt
            s.case("losses", f"kl_div.{red}.log{int(lt)}", f"F.kl_div(logp, q, reduction='{red}', log_target={lt})",
                   "kl_div", {"reduction": red, "log_target": lt}, [inp, tt],
                   lambda a, b, red=red, lt=lt: F.kl_div(a, b, reduction=red, log_target=lt), grad=(0, 1))
        s.case("losses", f"kl_div.{red}.zero_target", f"F.kl_div(logp, q with zeros, reduction='{red}')", "kl_div",
               {"reduction": red, "log_target": False}, [inp, tgt0],
               lambda a, b, red=red: F.kl_div(a, b, reduction=red), grad=(0,))


# ---------------------------------------------------------------- nn layers
def state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def layer_case(s, name, call, module, attrs, x, grad=True, train=False, rtol=1e-5, atol=1e-5, extra_inputs=(),
               group="nn", grad_inputs=(0,)):
    torch.manual_seed(0)
    module.train(train)
    st = state(module)
    params = [k for k, p in module.named_parameters()]

    def run(x, *rest):
        m = module
        m.load_state_dict(st)
        out = m(x, *rest)

        def flat(o):  # LSTM: (output, (h_n, c_n)) -> output, h_n, c_n
            if isinstance(o, (tuple, list)):
                return [y for z in o if z is not None for y in flat(z)]
            return [o]
        outs = flat(out)
        return tuple(outs) if len(outs) > 1 else outs[0]

    # The parameters' gradients come back as extra outputs: run once more through a wrapper.
    s.case(group, name, call, "module", dict(attrs, train=train, params=params), [x, *extra_inputs], run,
           grad=tuple(grad_inputs) if grad and x.dtype.is_floating_point else (), rtol=rtol, atol=atol, extra=st)
    if grad and params and json.loads(s.groups[group][1][name])["raises"] is None:
        module.load_state_dict(st)
        module.zero_grad()
        out = module(x.clone().requires_grad_(x.dtype.is_floating_point), *extra_inputs)
        out = out[0] if isinstance(out, tuple) else out
        g = torch.ones_like(out)
        out.backward(g)
        tensors, meta = s.groups[group]
        rec = json.loads(meta[name])
        rec["param_grads"] = params
        for k, p in module.named_parameters():
            tensors[f"{name}/pgrad.{k}"] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        meta[name] = json.dumps(rec, sort_keys=True, allow_nan=False)


def nn_layers(s):
    torch.manual_seed(3)
    layer_case(s, "Linear", "nn.Linear(5, 3)", torch.nn.Linear(5, 3), {"type": "Linear", "in": 5, "out": 3,
               "bias": True}, s.randn(4, 5))
    layer_case(s, "Linear.nobias", "nn.Linear(5, 3, bias=False)", torch.nn.Linear(5, 3, bias=False),
               {"type": "Linear", "in": 5, "out": 3, "bias": False}, s.randn(2, 4, 5))
    layer_case(s, "Conv2d", "nn.Conv2d(2, 3, 3, padding=1)", torch.nn.Conv2d(2, 3, 3, padding=1),
               {"type": "Conv2d", "in": 2, "out": 3, "kernel": [3, 3], "stride": [1, 1], "padding": [1, 1],
                "dilation": [1, 1], "groups": 1, "bias": True}, s.randn(2, 2, 5, 5), atol=1e-4)
    layer_case(s, "Conv2d.strided_groups", "nn.Conv2d(4, 4, (3, 2), stride=2, groups=2, dilation=(1, 2))",
               torch.nn.Conv2d(4, 4, (3, 2), stride=2, groups=2, dilation=(1, 2)),
               {"type": "Conv2d", "in": 4, "out": 4, "kernel": [3, 2], "stride": [2, 2], "padding": [0, 0],
                "dilation": [1, 2], "groups": 2, "bias": True}, s.randn(1, 4, 7, 8), atol=1e-4)
    layer_case(s, "Conv1d", "nn.Conv1d(3, 2, 3, stride=2, padding=1)", torch.nn.Conv1d(3, 2, 3, stride=2, padding=1),
               {"type": "Conv1d", "in": 3, "out": 2, "kernel": 3, "stride": 2, "padding": 1, "dilation": 1,
                "groups": 1, "bias": True}, s.randn(2, 3, 9), atol=1e-4)
    for train in [True, False]:
        bn = torch.nn.BatchNorm2d(3)
        with torch.no_grad():
            bn.weight.copy_(s.rand(3) + 0.5)
            bn.bias.copy_(s.randn(3))
            bn.running_mean.copy_(s.randn(3))
            bn.running_var.copy_(s.rand(3) + 0.5)
        layer_case(s, f"BatchNorm2d.train{int(train)}", f"nn.BatchNorm2d(3), train={train}", bn,
                   {"type": "BatchNorm2d", "features": 3}, s.randn(4, 3, 2, 2), train=train, atol=1e-4)
        bn1 = torch.nn.BatchNorm1d(4)
        layer_case(s, f"BatchNorm1d.train{int(train)}", f"nn.BatchNorm1d(4), train={train}", bn1,
                   {"type": "BatchNorm1d", "features": 4}, s.randn(6, 4), train=train, atol=1e-4)
    ln = torch.nn.LayerNorm([3, 4])
    with torch.no_grad():
        ln.weight.copy_(s.randn(3, 4))
        ln.bias.copy_(s.randn(3, 4))
    layer_case(s, "LayerNorm", "nn.LayerNorm([3, 4])", ln, {"type": "LayerNorm", "shape": [3, 4]}, s.randn(2, 3, 4),
               atol=1e-4)
    gn = torch.nn.GroupNorm(2, 4)
    layer_case(s, "GroupNorm", "nn.GroupNorm(2, 4)", gn, {"type": "GroupNorm", "groups": 2, "channels": 4},
               s.randn(2, 4, 3), atol=1e-4)
    emb = torch.nn.Embedding(6, 3, padding_idx=1)
    layer_case(s, "Embedding", "nn.Embedding(6, 3, padding_idx=1)", emb, {"type": "Embedding", "num": 6, "dim": 3,
               "padding_idx": 1}, torch.tensor([[0, 1, 5], [1, 2, 2]]), grad=True)
    for mode in [False, True]:
        layer_case(s, f"MaxPool2d.ceil{int(mode)}", f"nn.MaxPool2d(2, stride=2, ceil_mode={mode})",
                   torch.nn.MaxPool2d(2, stride=2, ceil_mode=mode), {"type": "MaxPool2d", "kernel": [2, 2],
                   "stride": [2, 2], "padding": [0, 0], "ceil_mode": mode}, s.randn(1, 2, 5, 5))
    layer_case(s, "MaxPool2d.padded", "nn.MaxPool2d(3, stride=2, padding=1)", torch.nn.MaxPool2d(3, 2, 1),
               {"type": "MaxPool2d", "kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": False},
               s.randn(1, 1, 6, 6))
    for cip in [True, False]:
        layer_case(s, f"AvgPool2d.cip{int(cip)}", f"nn.AvgPool2d(3, stride=2, padding=1, count_include_pad={cip})",
                   torch.nn.AvgPool2d(3, 2, 1, count_include_pad=cip), {"type": "AvgPool2d", "kernel": [3, 3],
                   "stride": [2, 2], "padding": [1, 1], "count_include_pad": cip}, s.randn(1, 2, 5, 5))
    layer_case(s, "AdaptiveAvgPool2d", "nn.AdaptiveAvgPool2d((2, 3))", torch.nn.AdaptiveAvgPool2d((2, 3)),
               {"type": "AdaptiveAvgPool2d", "size": [2, 3]}, s.randn(1, 2, 5, 7))
    layer_case(s, "Dropout.eval", "nn.Dropout(0.5).eval()", torch.nn.Dropout(0.5), {"type": "Dropout", "p": 0.5},
               s.randn(3, 4))
    for name, mod, attrs in [("ReLU", torch.nn.ReLU(), {}), ("GELU", torch.nn.GELU(), {}),
                             ("SiLU", torch.nn.SiLU(), {}), ("Tanh", torch.nn.Tanh(), {}),
                             ("Sigmoid", torch.nn.Sigmoid(), {}), ("LeakyReLU", torch.nn.LeakyReLU(0.2),
                                                                    {"slope": 0.2}),
                             ("Softmax", torch.nn.Softmax(dim=1), {"dim": 1}),
                             ("LogSoftmax", torch.nn.LogSoftmax(dim=0), {"dim": 0}),
                             ("Flatten", torch.nn.Flatten(), {}), ("Identity", torch.nn.Identity(), {}),
                             ("Hardswish", torch.nn.Hardswish(), {})]:
        layer_case(s, name, f"nn.{name}({attrs})", mod, dict(attrs, type=name), s.randn(3, 4, 2))
    seq = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    layer_case(s, "Sequential", "nn.Sequential(Linear(4, 6), ReLU(), Linear(6, 2))", seq, {"type": "Sequential"},
               s.randn(3, 4))
    for kind in ["LSTM", "GRU", "RNN"]:
        torch.manual_seed(5)
        rnn = getattr(torch.nn, kind)(3, 4, num_layers=2, batch_first=True)
        layer_case(s, kind, f"nn.{kind}(3, 4, num_layers=2, batch_first=True)", rnn,
                   {"type": kind, "in": 3, "hidden": 4, "layers": 2, "batch_first": True}, s.randn(2, 5, 3),
                   atol=1e-4)
    class Attention(torch.nn.MultiheadAttention):  # the attended values only, state dict keys unchanged
        def forward(self, q, k, v, key_padding_mask=None):
            return super().forward(q, k, v, key_padding_mask=key_padding_mask, need_weights=False)[0]

    torch.manual_seed(6)
    mha = Attention(8, 2, batch_first=True)
    q = s.randn(2, 3, 8)
    layer_case(s, "MultiheadAttention", "nn.MultiheadAttention(8, 2, batch_first=True)(q, q, q)", mha,
               {"type": "MultiheadAttention", "dim": 8, "heads": 2}, q, atol=1e-4, extra_inputs=(q, q))
    for norm_first, act in [(False, "relu"), (True, "gelu")]:
        torch.manual_seed(8)
        enc = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation=act,
                                               batch_first=True, norm_first=norm_first)
        layer_case(s, f"TransformerEncoderLayer.{'pre' if norm_first else 'post'}_{act}",
                   f"nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0, activation='{act}', "
                   f"batch_first=True, norm_first={norm_first})", enc,
                   {"type": "TransformerEncoderLayer", "dim": 8, "heads": 2, "ff": 16, "norm_first": norm_first,
                    "gelu": act == "gelu"}, s.randn(2, 3, 8), atol=1e-4, train=True)
    mask = torch.tensor([[False, True, False], [True, True, True]])  # batch 1: every key is padding
    layer_case(s, "MultiheadAttention.all_keys_masked",
               "nn.MultiheadAttention(8, 2, batch_first=True)(q, q, q, key_padding_mask) with a row all padding "
               "(training mode: zeros there)", mha, {"type": "MultiheadAttention", "dim": 8, "heads": 2, "mask": True},
               q, atol=1e-4, extra_inputs=(q, q, mask), train=True)


# ---------------------------------------------------------------- bidirectional recurrent layers
RNN_KINDS = [("RNN", "tanh"), ("RNN", "relu"), ("LSTM", None), ("GRU", None)]


def record_param_grads(s, group, name, module, forward):
    """After a module's case: the gradients of every parameter for the case's upstream gradients
    of its outputs, as "<case>/pgrad.<name>" entries (zeros for a parameter the outputs do not
    reach), and "param_grads" in its record. Nothing where PyTorch raised."""
    tensors, meta = s.groups[group]
    rec = json.loads(meta[name])
    if rec["raises"] is not None:
        return
    outs = forward()
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    gouts = [tensors[f"{name}/gout{i}"] for i in rec["gout_of"]]
    names = [k for k, _ in module.named_parameters()]
    params = [p for _, p in module.named_parameters()]
    grads = torch.autograd.grad([outs[i] for i in rec["gout_of"]], params, gouts, allow_unused=True)
    for k, gr, p in zip(names, grads, params):
        tensors[f"{name}/pgrad.{k}"] = (gr if gr is not None else torch.zeros_like(p)).detach().contiguous().clone()
    rec["param_grads"] = names
    meta[name] = json.dumps(rec, sort_keys=True, allow_nan=False)


def rnn_case(s, name, kind, nonlinearity, x, layers=2, batch_first=False, bidirectional=True, bias=True,
             dropout=0.0, h0_shape=None, hidden=3, input_size=None, seed=11, proj_size=0, c0_shape=None):
    """One recurrent layer's case in group rnn2: inputs x and, with h0_shape, the initial states
    (h0, and c0 for an LSTM); outputs output, h_n (and c_n); gradients of the inputs and of every
    parameter (pgrad.<name>) for the case's random upstream gradients of all outputs."""
    torch.manual_seed(seed)
    opts = dict(num_layers=layers, batch_first=batch_first, bidirectional=bidirectional, bias=bias, dropout=dropout)
    if proj_size:
        opts["proj_size"] = proj_size
    if nonlinearity is not None:
        opts["nonlinearity"] = nonlinearity
    input_size = input_size or x.shape[-1]
    module = getattr(torch.nn, kind)(input_size, hidden, **opts).eval()
    st = state(module)
    names = [k for k, _ in module.named_parameters()]
    lstm = kind == "LSTM"
    states = []
    if h0_shape is not None:
        states = [s.randn(*h0_shape)] + ([s.randn(*(c0_shape or h0_shape))] if lstm else [])

    def run(x, *hx):
        module.load_state_dict(st)
        out, h = module(x, (tuple(hx) if lstm else hx[0]) if hx else None)
        return (out, *h) if lstm else (out, h)

    call = f"nn.{kind}({input_size}, {hidden}, {', '.join(f'{k}={v!r}' for k, v in opts.items())})(x [" + \
        ", ".join(map(str, x.shape)) + "]" + \
        (f", {'(h0, c0)' if lstm else 'h0'} {list(h0_shape)}" if states else "") + ")"
    attrs = {"type": kind, "in": input_size, "hidden": hidden, "layers": layers, "batch_first": batch_first,
             "bidirectional": bidirectional, "bias": bias, "dropout": dropout, "nonlinearity": nonlinearity or "tanh",
             "train": False, "params": names, "proj_size": proj_size}
    grad = tuple(range(1 + len(states)))
    s.case("rnn2", name, call, "rnn", attrs, [x, *states], run, grad=grad, rtol=1e-5, atol=1e-5, extra=st)
    record_param_grads(s, "rnn2", name, module, lambda: run(x, *states))


def cell_case(s, name, kind, x, states=(), bias=True, nonlinearity=None, hidden=3, input_size=None, seed=17):
    """One step of nn.RNNCell / GRUCell / LSTMCell in group rnn2: outputs h' (and c'); gradients
    of the input, the states and every parameter (pgrad.<name>)."""
    torch.manual_seed(seed)
    kw = {"bias": bias}
    if nonlinearity is not None:
        kw["nonlinearity"] = nonlinearity
    input_size = input_size or x.shape[-1]
    module = getattr(torch.nn, kind)(input_size, hidden, **kw)
    st = state(module)
    names = [k for k, _ in module.named_parameters()]
    lstm = kind == "LSTMCell"

    def run(x, *hx):
        module.load_state_dict(st)
        if lstm:
            return module(x, tuple(hx) if hx else None)
        return module(x, hx[0] if hx else None)

    attrs = {"type": kind, "in": input_size, "hidden": hidden, "bias": bias, "nonlinearity": nonlinearity or "tanh"}
    call = f"nn.{kind}({input_size}, {hidden}, {kw})(x {list(x.shape)}" + \
        (f", states {[list(t.shape) for t in states]}" if states else "") + ")"
    s.case("rnn2", name, call, "cell", attrs, [x, *states], run, grad=tuple(range(1 + len(states))), rtol=1e-5,
           atol=1e-5, extra=st)
    record_param_grads(s, "rnn2", name, module, lambda: run(x, *states))


def rnn2(s):
    T, N, F_IN, H = 5, 2, 2, 3
    for kind, act in RNN_KINDS:
        tag = kind if act is None else f"{kind}_{act}"
        for layers in [1, 2]:
            for batch_first in [False, True]:
                for init in [False, True]:
                    x = s.randn(N, T, F_IN) if batch_first else s.randn(T, N, F_IN)
                    rnn_case(s, f"{tag}.l{layers}.bf{int(batch_first)}.h0{int(init)}", kind, act, x, layers=layers,
                             batch_first=batch_first, h0_shape=(2 * layers, N, H) if init else None)
        # Unbatched [T, F] (batch_first has no effect there), with and without initial states.
        rnn_case(s, f"{tag}.unbatched", kind, act, s.randn(T, F_IN))
        rnn_case(s, f"{tag}.unbatched.bf1.h0", kind, act, s.randn(T, F_IN), batch_first=True, h0_shape=(4, H))
        rnn_case(s, f"{tag}.nobias", kind, act, s.randn(T, N, F_IN), bias=False, h0_shape=(4, N, H))
        # Refused: initial states sized for one direction.
        rnn_case(s, f"{tag}.h0_one_direction", kind, act, s.randn(T, N, F_IN), h0_shape=(2, N, H))
    # Dropout between layers does nothing in eval mode; unidirectional unbatched input.
    rnn_case(s, "LSTM.dropout.eval", "LSTM", None, s.randn(T, N, F_IN), layers=3, dropout=0.5, h0_shape=(6, N, H))
    for kind in ["LSTM", "GRU"]:
        rnn_case(s, f"{kind}.unidirectional.unbatched", kind, None, s.randn(T, F_IN), bidirectional=False,
                 h0_shape=(2, H))
    # Refused: states whose rank does not match the input's, input of the wrong rank or width.
    rnn_case(s, "LSTM.unbatched_with_3d_h0", "LSTM", None, s.randn(T, F_IN), h0_shape=(4, 1, H))
    rnn_case(s, "GRU.batched_with_2d_h0", "GRU", None, s.randn(T, N, F_IN), h0_shape=(4, H))
    rnn_case(s, "GRU.input_4d", "GRU", None, s.randn(1, T, N, F_IN))
    rnn_case(s, "LSTM.wrong_input_size", "LSTM", None, s.randn(T, N, F_IN + 1), input_size=F_IN)
    # LSTM proj_size: h (output, h_n, h0) has P features, c keeps H; weight_hr_l{k} [P, H].
    P, HP = 2, 4
    for layers in [1, 2]:
        for bidirectional in [False, True]:
            D = 2 if bidirectional else 1
            for init in [False, True]:
                rnn_case(s, f"LSTM.proj.l{layers}.bi{int(bidirectional)}.h0{int(init)}", "LSTM", None,
                         s.randn(T, N, F_IN), layers=layers, bidirectional=bidirectional, hidden=HP, proj_size=P,
                         h0_shape=(D * layers, N, P) if init else None,
                         c0_shape=(D * layers, N, HP) if init else None)
    rnn_case(s, "LSTM.proj.batch_first.unbatched", "LSTM", None, s.randn(T, F_IN), layers=2, hidden=HP, proj_size=P,
             h0_shape=(4, P), c0_shape=(4, HP))
    rnn_case(s, "LSTM.proj.h0_of_hidden_size", "LSTM", None, s.randn(T, N, F_IN), layers=1, bidirectional=False,
             hidden=HP, proj_size=P, h0_shape=(1, N, HP), c0_shape=(1, N, HP))
    # The cells: one step, batched and unbatched, with and without states and bias.
    for kind, act in [("RNNCell", "tanh"), ("RNNCell", "relu"), ("GRUCell", None), ("LSTMCell", None)]:
        tag = kind if act is None else f"{kind}_{act}"
        n_states = 2 if kind == "LSTMCell" else 1
        cell_case(s, f"{tag}.batched", kind, s.randn(N, F_IN), nonlinearity=act)
        cell_case(s, f"{tag}.batched.states", kind, s.randn(N, F_IN), [s.randn(N, H) for _ in range(n_states)],
                  nonlinearity=act)
        cell_case(s, f"{tag}.unbatched.states", kind, s.randn(F_IN), [s.randn(H) for _ in range(n_states)],
                  nonlinearity=act)
        cell_case(s, f"{tag}.nobias", kind, s.randn(N, F_IN), bias=False, nonlinearity=act)
        cell_case(s, f"{tag}.input_3d_raises", kind, s.randn(1, N, F_IN), nonlinearity=act)
        cell_case(s, f"{tag}.state_rank_raises", kind, s.randn(N, F_IN), [s.randn(H) for _ in range(n_states)],
                  nonlinearity=act)


# ---------------------------------------------------------------- optimizers
def optimizers(s):
    configs = [
        ("SGD", {"lr": 0.1}), ("SGD", {"lr": 0.1, "momentum": 0.9}),
        ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
        ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.5}),
        ("Adam", {"lr": 0.01}), ("Adam", {"lr": 0.01, "weight_decay": 0.1}),
        ("Adam", {"lr": 0.01, "amsgrad": True}), ("Adam", {"lr": 0.01, "betas": [0.5, 0.9], "eps": 1e-6}),
        ("AdamW", {"lr": 0.01}), ("AdamW", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}),
        ("RMSprop", {"lr": 0.01}), ("RMSprop", {"lr": 0.01, "momentum": 0.9, "centered": True}),
        ("RMSprop", {"lr": 0.01, "alpha": 0.9, "weight_decay": 0.1}),
    ]
    optimizer_cases(s, "optim", configs)


def optimizer_cases(s, group, configs):
    for kind, opts in configs:
        p0 = [s.randn(3, 2), s.randn(4)]
        grads = [[s.randn(3, 2), s.randn(4)] for _ in range(10)]
        params = [p.clone().requires_grad_() for p in p0]
        kw = dict(opts)
        if "betas" in kw:
            kw["betas"] = tuple(kw["betas"])
        opt = getattr(torch.optim, kind)(params, **kw)
        traj = []
        for g in grads:
            for p, gi in zip(params, g):
                p.grad = gi.clone()
            opt.step()
            traj.append(torch.cat([p.detach().reshape(-1) for p in params]))
        extra = {f"g{t}.{i}": g for t, gs in enumerate(grads) for i, g in enumerate(gs)}
        name = kind + "." + ".".join(f"{k}{v}" for k, v in sorted(opts.items())).replace(" ", "")
        traj_t = torch.stack(traj)
        s.case(group, name, f"torch.optim.{kind}(params, {opts}), 10 steps", "optim",
               {"type": kind, "options": opts, "steps": 10}, p0, lambda *a, t=traj_t: t, rtol=1e-5, atol=1e-6,
               extra=extra)


# ---------------------------------------------------------------- LR schedules
def schedules(s):
    def seq(make, steps=50, lr=0.1, momentum=None):
        p = torch.zeros(1, requires_grad=True)
        kw = {"lr": lr}
        if momentum is not None:
            kw["momentum"] = momentum
        opt = torch.optim.SGD([p], **kw)
        sch = make(opt)
        lrs, moms = [], []
        for _ in range(steps):
            lrs.append(opt.param_groups[0]["lr"])
            moms.append(opt.param_groups[0].get("momentum", 0.0))
            opt.step()
            sch.step()
        return torch.tensor(lrs, dtype=F64), torch.tensor(moms, dtype=F64)

    S = torch.optim.lr_scheduler
    configs = [
        ("StepLR", {"step_size": 7, "gamma": 0.5}, lambda o: S.StepLR(o, 7, 0.5)),
        ("MultiStepLR", {"milestones": [5, 12, 30], "gamma": 0.3}, lambda o: S.MultiStepLR(o, [5, 12, 30], 0.3)),
        ("ExponentialLR", {"gamma": 0.95}, lambda o: S.ExponentialLR(o, 0.95)),
        ("CosineAnnealingLR", {"T_max": 20, "eta_min": 0.001}, lambda o: S.CosineAnnealingLR(o, 20, 0.001)),
        ("CosineAnnealingLR.Tmax50", {"T_max": 50, "eta_min": 0.0}, lambda o: S.CosineAnnealingLR(o, 50)),
        ("OneCycleLR", {"max_lr": 1.0, "total_steps": 50}, lambda o: S.OneCycleLR(o, 1.0, total_steps=50)),
        ("OneCycleLR.pct", {"max_lr": 0.5, "total_steps": 50, "pct_start": 0.25, "div_factor": 10.0,
                            "final_div_factor": 100.0},
         lambda o: S.OneCycleLR(o, 0.5, total_steps=50, pct_start=0.25, div_factor=10.0, final_div_factor=100.0)),
        ("OneCycleLR.fractional_peak", {"max_lr": 1.0, "total_steps": 30, "pct_start": 0.25},
         lambda o: S.OneCycleLR(o, 1.0, total_steps=30, pct_start=0.25)),
        ("OneCycleLR.no_momentum_cycle", {"max_lr": 1.0, "total_steps": 50, "cycle_momentum": False},
         lambda o: S.OneCycleLR(o, 1.0, total_steps=50, cycle_momentum=False)),
    ]
    for name, opts, make in configs:
        steps = opts.get("total_steps", 50)
        mom = 0.9 if name.startswith("OneCycleLR") else None
        lrs, moms = seq(make, steps=steps, momentum=mom)
        kind = name.split(".")[0]
        s.case("sched", name, f"torch.optim.lr_scheduler.{kind}(SGD(lr=0.1{', momentum=0.9' if mom else ''}), "
               f"{opts}), {steps} steps", "sched", {"type": kind, "options": opts, "steps": steps,
                                                    "momentum": mom}, [],
               lambda l=lrs, m=moms: (l, m), rtol=1e-9, atol=1e-12)


    # ReduceLROnPlateau: the rate after each of 50 metric values (improving, then a noisy plateau).
    metrics = [1.0 / (1 + t) if t < 15 else 0.06 + 0.001 * ((t * 7) % 5) for t in range(50)]
    for mode, factor, patience, cooldown, thr, min_lr in [("min", 0.5, 3, 0, 1e-4, 0.0),
                                                         ("min", 0.1, 2, 2, 0.01, 0.002),
                                                         ("max", 0.5, 4, 1, 1e-4, 0.0)]:
        vals = metrics if mode == "min" else [-v for v in metrics]

        def plateau(m, mode=mode, factor=factor, patience=patience, cooldown=cooldown, thr=thr, min_lr=min_lr):
            p = torch.zeros(1, requires_grad=True)
            opt = torch.optim.SGD([p], lr=0.1)
            sch = S.ReduceLROnPlateau(opt, mode, factor=factor, patience=patience, threshold=thr, cooldown=cooldown,
                                      min_lr=min_lr)
            lrs = []
            for v in m.tolist():
                opt.step()
                sch.step(v)
                lrs.append(opt.param_groups[0]["lr"])
            return torch.tensor(lrs, dtype=F64)
        opts = {"mode": mode, "factor": factor, "patience": patience, "cooldown": cooldown, "threshold": thr,
                "min_lr": min_lr}
        s.case("sched", f"ReduceLROnPlateau.{mode}.f{factor}.p{patience}.c{cooldown}",
               f"torch.optim.lr_scheduler.ReduceLROnPlateau(SGD(lr=0.1), {opts}) over 50 metrics", "plateau", opts,
               [torch.tensor(vals, dtype=F64)], plateau, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- indexing
def indexing(s):
    x = torch.arange(60.0).reshape(3, 4, 5)

    def spec_to_py(spec, tensors):
        out = []
        for it in spec:
            k = it["kind"]
            if k == "int":
                out.append(it["v"])
            elif k == "slice":
                out.append(slice(it.get("start"), it.get("stop"), it.get("step")))
            elif k == "none":
                out.append(None)
            elif k == "ellipsis":
                out.append(Ellipsis)
            elif k == "tensor":
                out.append(tensors[it["input"] - 1])
        return tuple(out)

    def I(v):
        return {"kind": "int", "v": v}

    def Sl(start=None, stop=None, step=None):
        return {"kind": "slice", "start": start, "stop": stop, "step": step}

    N, E = {"kind": "none"}, {"kind": "ellipsis"}

    def T(i):
        return {"kind": "tensor", "input": i}
    idx_a = torch.tensor([2, 0, -1])
    idx_b = torch.tensor([[1], [3]])
    mask = torch.tensor([True, False, True, True])
    specs = [
        ("int", [I(1)], []), ("neg_int", [I(-1), I(-2)], []), ("slice", [Sl(1, None)], []),
        ("slice_step", [Sl(None, None, 2), Sl(1, 4, 2)], []), ("slice_neg", [Sl(-2, None), Sl(None, -1)], []),
        ("slice_oob", [Sl(1, 100), Sl(-100, 2)], []), ("none", [N, I(0)], []), ("ellipsis", [E, I(2)], []),
        ("ellipsis_none", [I(0), E, N], []), ("tensor", [T(1)], [idx_a]), ("tensor_dim1", [Sl(), T(1)], [idx_a]),
        ("two_tensors_broadcast", [T(1), T(2)], [torch.tensor([0, 2]), idx_b]),
        ("separated_tensors", [T(1), Sl(), T(2)], [torch.tensor([0, 2]), torch.tensor([1, 4])]),
        ("tensor_slice_none", [T(1), N, Sl(1, 3)], [idx_a]), ("mask", [Sl(), T(1)], [mask]),
        ("mask_first", [T(1)], [torch.tensor([True, False, True])]),
        ("int_and_tensor", [I(1), T(1)], [torch.tensor([3, 0])]),
        ("ellipsis_tensor", [E, T(1)], [torch.tensor([4, 0, 1])]),
        ("oob_raises", [T(1)], [torch.tensor([3])]),
        ("too_many_raises", [I(0), I(0), I(0), I(0)], []),
    ]
    for name, spec, tens in specs:
        s.case("indexing", f"get.{name}", f"x[{spec}]", "index", {"spec": spec}, [x, *tens],
               lambda x, *t, spec=spec: x[spec_to_py(spec, t)], grad=(0,))
    for name, spec, tens in specs[:18]:
        def setter(x, v, *t, spec=spec):
            y = x.clone()
            y[spec_to_py(spec, t)] = v
            return y
        target_shape = x[spec_to_py(spec, tens)].shape
        s.case("indexing", f"set.{name}", f"y = x.clone(); y[{spec}] = v", "index_put", {"spec": spec},
               [x, s.randn(*target_shape), *tens], setter, grad=(0, 1))
    s.case("indexing", "index_put.accumulate", "x.index_put((i,), v, accumulate=True) with repeats", "index_put_acc", {},
           [torch.zeros(5), torch.tensor([1, 1, 3, 1]), torch.tensor([1.0, 2.0, 3.0, 4.0])],
           lambda x, i, v: x.index_put((i,), v, accumulate=True), grad=(0, 2))
    src = s.randn(3, 4)
    ind = torch.tensor([[0, 1, 2, 0], [1, 2, 0, 1]])
    s.case("indexing", "gather", "torch.gather(x, 0, idx)", "gather", {"dim": 0}, [src, ind],
           lambda a, i: torch.gather(a, 0, i), grad=(0,))
    s.case("indexing", "gather.dim1", "torch.gather(x, 1, idx)", "gather", {"dim": 1}, [src, ind[:, :3].t()],
           lambda a, i: torch.gather(a, 1, i), grad=(0,))
    s.case("indexing", "scatter", "torch.scatter(x, 0, idx, src)", "scatter", {"dim": 0},
           [torch.zeros(3, 4), torch.tensor([[0, 1, 2, 0]]), s.randn(1, 4)],
           lambda a, i, v: torch.scatter(a, 0, i, v), grad=(0, 2))
    s.case("indexing", "scatter_add", "torch.scatter_add(x, 0, idx, src)", "scatter_add", {"dim": 0},
           [s.randn(3, 4), ind, s.randn(2, 4)], lambda a, i, v: torch.scatter_add(a, 0, i, v), grad=(0, 2))
    for red in ["sum", "prod", "mean", "amax", "amin"]:
        for incl in [True, False]:
            s.case("indexing", f"scatter_reduce.{red}.self{int(incl)}",
                   f"torch.scatter_reduce(x, 0, idx, src, '{red}', include_self={incl})", "scatter_reduce",
                   {"dim": 0, "reduce": red, "include_self": incl}, [s.randn(3, 4), ind, s.randn(2, 4)],
                   lambda a, i, v, red=red, incl=incl: torch.scatter_reduce(a, 0, i, v, red, include_self=incl))
    for red in ["add", "multiply"]:
        s.case("indexing", f"scatter.reduce_{red}", f"x.scatter(0, idx, src, reduce='{red}')", "scatter_legacy_reduce",
               {"dim": 0, "reduce": red}, [s.randn(3, 4), ind, s.randn(2, 4)],
               lambda a, i, v, red=red: a.scatter(0, i, v, reduce=red))
    for red in ["amax", "amin", "prod", "sum", "mean"]:
        s.case("indexing", f"scatter_reduce.int64.{red}",
               f"torch.scatter_reduce(int64 x, 0, idx, int64 src, '{red}', include_self=False)", "scatter_reduce",
               {"dim": 0, "reduce": red, "include_self": False},
               [s.randint(-9, 9, (3, 4)), ind, s.randint(-9, 9, (2, 4))],
               lambda a, i, v, red=red: torch.scatter_reduce(a, 0, i, v, red, include_self=False))
    s.case("indexing", "index_select", "torch.index_select(x, 1, idx)", "index_select", {"dim": 1},
           [src, torch.tensor([3, 0, 3])], lambda a, i: torch.index_select(a, 1, i), grad=(0,))
    s.case("indexing", "index_add", "torch.index_add(x, 0, idx, src, alpha=2)", "index_add", {"dim": 0, "alpha": 2.0},
           [s.randn(3, 2), torch.tensor([0, 2, 0]), s.randn(3, 2)],
           lambda a, i, v: torch.index_add(a, 0, i, v, alpha=2), grad=(0, 2))
    s.case("indexing", "masked_fill", "x.masked_fill(mask, -1.5)", "masked_fill", {"value": -1.5},
           [src, src > 0], lambda a, m: a.masked_fill(m, -1.5), grad=(0,))
    s.case("indexing", "masked_select", "torch.masked_select(x, mask)", "masked_select", {}, [src, src > 0],
           lambda a, m: torch.masked_select(a, m), grad=(0,))
    s.case("indexing", "nonzero", "torch.nonzero(x)", "nonzero", {}, [torch.tensor([[0, 1], [2, 0], [3, 3]])],
           torch.nonzero)
    ns = torch.tensor([3.0, math.nan, -1.0, 3.0, -math.inf, 0.0])
    for desc in [False, True]:
        s.case("indexing", f"sort.desc{int(desc)}", f"torch.sort(x with nan, ties, descending={desc}, stable=True)",
               "sort", {"descending": desc}, [ns], lambda a, d=desc: torch.sort(a, descending=d, stable=True),
               grad=(0,))
    s.case("indexing", "topk", "torch.topk(x, 3)", "topk", {"k": 3, "largest": True}, [s.randn(2, 6)],
           lambda a: torch.topk(a, 3), grad=(0,))
    s.case("indexing", "topk.smallest", "torch.topk(x, 2, largest=False)", "topk", {"k": 2, "largest": False},
           [s.randn(2, 6)], lambda a: torch.topk(a, 2, largest=False), grad=(0,))
    s.case("indexing", "one_hot", "F.one_hot(t, 5)", "one_hot", {"classes": 5}, [torch.tensor([0, 4, 2])],
           lambda t: F.one_hot(t, 5))
    s.case("indexing", "cat", "torch.cat([a, b], 1)", "cat", {"dim": 1}, [s.randn(2, 3), s.randn(2, 1)],
           lambda a, b: torch.cat([a, b], 1), grad=(0, 1))
    s.case("indexing", "cat.promote", "torch.cat([int64, float32])", "cat", {"dim": 0},
           [torch.tensor([1, 2]), s.randn(2)], lambda a, b: torch.cat([a, b]))
    s.case("indexing", "stack", "torch.stack([a, b], 1)", "stack", {"dim": 1}, [s.randn(2, 3), s.randn(2, 3)],
           lambda a, b: torch.stack([a, b], 1), grad=(0, 1))
    for pads in [[1, 2], [1, 0, 2, 1], [-1, 1], [-1, -1, 0, 2]]:
        s.case("indexing", f"pad.{pads}", f"F.pad(x, {pads}, value=0.5)", "pad", {"pads": pads, "value": 0.5},
               [s.randn(2, 3, 4)], lambda a, p=pads: F.pad(a, p, value=0.5), grad=(0,))


# ---------------------------------------------------------------- views
def apply_view_chain(t, chain):
    """Applies a chain of view steps ([op, args...]), as the view_chain binding does."""
    for step in chain:
        op, args = step[0], step[1:]
        if op == "slice":
            d, a, b, st = args
            t = t[(slice(None),) * d + (slice(a, b, st),)]
        elif op == "split":
            size, d, k = args
            t = torch.split(t, size, d)[k]
        elif op == "chunk":
            n, d, k = args
            t = torch.chunk(t, n, d)[k]
        elif op == "as_strided":
            t = t.as_strided(*args)
        elif op == "expand":
            t = t.expand(*args[0])
        elif op in ("view", "reshape"):
            t = getattr(t, op)(*args[0])
        elif op == "permute":
            t = t.permute(*args[0])
        elif op == "unflatten":
            t = t.unflatten(args[0], args[1])
        else:
            t = getattr(t, op)(*args)
    return t


def views(s):
    x = s.randn(3, 4)
    chains = [
        ("transpose", [["transpose", 0, 1]]), ("t_narrow", [["t"], ["narrow", 0, 1, 2]]),
        ("select", [["select", 1, 2]]), ("unsqueeze_expand", [["unsqueeze", 0], ["expand", [2, 3, 4]]]),
        ("view", [["view", [2, 6]]]), ("reshape_t", [["t"], ["reshape", [12]]]),
        ("permute", [["view", [3, 2, 2]], ["permute", [2, 0, 1]]]), ("flatten", [["view", [3, 2, 2]], ["flatten", 1]]),
        ("squeeze", [["unsqueeze", 1], ["squeeze", 1]]), ("slice_step", [["slice", 1, 0, 4, 2]]),
        ("diagonal_like", [["as_strided", [3], [5], 0]]), ("split", [["split", 2, 1, 1]]),
        ("chunk", [["chunk", 3, 0, 2]]), ("movedim", [["view", [3, 2, 2]], ["movedim", 0, 2]]),
        ("unflatten", [["unflatten", 1, [2, 2]]]),
    ]

    apply = apply_view_chain

    for name, chain in chains:
        s.case("views", f"view.{name}", f"x.{chain}", "view_chain", {"chain": chain}, [x],
               lambda t, c=chain: apply(t, c).contiguous() * 1.0, grad=(0,))
        if name not in ("unsqueeze_expand",):
            def inplace(base, c=chain):
                b = base.clone()
                v = apply(b, c)
                v.mul_(2.0).add_(1.0)
                return b
            s.case("views", f"inplace.{name}", f"b = x.clone(); b.{chain}.mul_(2).add_(1); b", "view_inplace",
                   {"chain": chain}, [x], inplace, grad=(0,))
    s.case("views", "inplace.expand_raises", "x.unsqueeze(0).expand(2, 3, 4).add_(1)", "view_inplace",
           {"chain": [["unsqueeze", 0], ["expand", [2, 3, 4]]]}, [x],
           lambda base: apply(base.clone(), [["unsqueeze", 0], ["expand", [2, 3, 4]]]).mul_(2.0))
    s.case("views", "view.noncontiguous_raises", "x.t().view(12)", "view_chain", {"chain": [["t"], ["view", [12]]]},
           [x], lambda t: t.t().view(12))


# ---------------------------------------------------------------- selection and scans, round two
def selection(s):
    """cumprod, kthvalue, median, repeat/tile, topk and kthvalue over ties (values, and indices
    that point at equal values: PyTorch's CPU quickselect orders ties its own way), as_strided of
    a non-contiguous view, and the gradients the first round left open: prod over inf and 0,
    scatter_reduce, binary cross-entropy's target."""
    G = "selection"
    inputs = {
        "random": s.randn(3, 5),
        "nan": torch.tensor([[1.0, math.nan, 3.0, 0.5, 2.0], [2.0, -1.0, 4.0, -3.0, 0.0],
                             [math.nan, 1.0, math.nan, 3.0, -2.0]]),
        "inf": torch.tensor([[1.0, math.inf, 3.0, 0.5, -2.0], [-math.inf, -1.0, 4.0, -3.0, 7.0],
                             [0.0, 1.0, 2.0, 3.0, math.inf]]),
        "zeros": torch.tensor([[2.0, 0.0, 3.0, 1.0, -1.5], [0.0, 0.0, 3.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0, 0.0]]),
        "even": s.randn(3, 4),
    }
    for iname, x in inputs.items():
        for dim in [1, 0, -1]:
            s.case(G, f"cumprod.{iname}.d{dim}", f"torch.cumprod(x[{iname}], {dim})", "reduce",
                   {"op": "cumprod", "dim": [dim]}, [x], lambda t, d=dim: torch.cumprod(t, d), grad=(0,))
            if iname == "zeros":
                continue  # tied zeros: the ties cases below
            for keep in [False, True]:
                s.case(G, f"median.{iname}.d{dim}.k{int(keep)}", f"torch.median(x[{iname}], {dim}, keepdim={keep})",
                       "reduce", {"op": "median_dim", "dim": [dim], "keepdim": keep}, [x],
                       lambda t, d=dim, k=keep: tuple(torch.median(t, d, keepdim=k)), grad=(0,))
                n = x.shape[dim]
                for k in sorted({1, (n + 1) // 2, n}):
                    s.case(G, f"kthvalue.{iname}.k{k}.d{dim}.k{int(keep)}",
                           f"torch.kthvalue(x[{iname}], {k}, {dim}, keepdim={keep})", "reduce",
                           {"op": "kthvalue", "k": k, "dim": [dim], "keepdim": keep}, [x],
                           lambda t, k=k, d=dim, kd=keep: tuple(torch.kthvalue(t, k, d, keepdim=kd)), grad=(0,))
        s.case(G, f"median_all.{iname}", f"torch.median(x[{iname}])", "reduce", {"op": "median_all", "dim": None},
               [x], lambda t: torch.median(t), grad=(0,))
    # median() shares the gradient among the elements equal to it; a tie of three.
    s.case(G, "median_all.ties", "torch.median([2, 1, 2, 3, 2])", "reduce", {"op": "median_all", "dim": None},
           [torch.tensor([2.0, 1.0, 2.0, 3.0, 2.0])], lambda t: torch.median(t), grad=(0,))
    s.case(G, "median_all.empty", "torch.median(empty)", "reduce", {"op": "median_all", "dim": None},
           [torch.zeros(0)], lambda t: torch.median(t))
    s.case(G, "median.empty_dim_raises", "torch.median(zeros(0, 3), 0)", "reduce",
           {"op": "median_dim", "dim": [0], "keepdim": False}, [torch.zeros(0, 3)], lambda t: tuple(torch.median(t, 0)))
    s.case(G, "median.scalar", "torch.median(tensor(2.5), 0)", "reduce", {"op": "median_dim", "dim": [0],
           "keepdim": False}, [torch.tensor(2.5)], lambda t: tuple(torch.median(t, 0)), grad=(0,))
    for dt in [I64, I32, U8]:
        x = s.randint(0, 50, (3, 5)).to(dt)
        s.case(G, f"median.{dtype_name(dt)}", f"torch.median({dtype_name(dt)} x, 1)", "reduce",
               {"op": "median_dim", "dim": [1], "keepdim": False}, [x], lambda t: tuple(torch.median(t, 1)))
        s.case(G, f"kthvalue.{dtype_name(dt)}", f"torch.kthvalue({dtype_name(dt)} x, 2, 1)", "reduce",
               {"op": "kthvalue", "k": 2, "dim": [1], "keepdim": False}, [x], lambda t: tuple(torch.kthvalue(t, 2, 1)))
        s.case(G, f"cumprod.{dtype_name(dt)}", f"torch.cumprod({dtype_name(dt)} x, 1)", "reduce",
               {"op": "cumprod", "dim": [1]}, [s.randint(0, 4, (3, 5)).to(dt)], lambda t: torch.cumprod(t, 1))
    s.case(G, "cumprod.bool", "torch.cumprod(bool x, 0)", "reduce", {"op": "cumprod", "dim": [0]},
           [torch.tensor([True, True, False, True])], lambda t: torch.cumprod(t, 0))
    s.case(G, "cumprod.scalar", "torch.cumprod(tensor(1.5), 0)", "reduce", {"op": "cumprod", "dim": [0]},
           [torch.tensor(1.5)], lambda t: torch.cumprod(t, 0), grad=(0,))
    s.case(G, "cumprod.empty", "torch.cumprod(zeros(0, 3), 0)", "reduce", {"op": "cumprod", "dim": [0]},
           [torch.zeros(0, 3)], lambda t: torch.cumprod(t, 0), grad=(0,))
    for dt in [F16, BF16, F64]:
        s.case(G, f"cumprod.{dtype_name(dt)}", f"torch.cumprod({dtype_name(dt)} x, 1)", "reduce",
               {"op": "cumprod", "dim": [1]}, [(s.rand(3, 6) + 0.5).to(dt)], lambda t: torch.cumprod(t, 1), grad=(0,),
               rtol=1e-2 if dt in (F16, BF16) else 1e-12, atol=1e-3 if dt in (F16, BF16) else 1e-14)
    for name, k in [("k0", 0), ("k_past", 6)]:
        s.case(G, f"kthvalue.{name}_raises", f"torch.kthvalue(x [3, 5], {k}, 1)", "reduce",
               {"op": "kthvalue", "k": k, "dim": [1], "keepdim": False}, [inputs["random"]],
               lambda t, k=k: tuple(torch.kthvalue(t, k, 1)))
    s.case(G, "median.bool_raises", "torch.median(bool x)", "reduce", {"op": "median_all", "dim": None},
           [torch.tensor([True, False])], lambda t: torch.median(t))
    # Ties: values, and the input at the returned indices (which must hold those values).
    ties = torch.tensor([[2.0, 2.0, 1.0, 2.0, 2.0], [5.0, 5.0, 5.0, 5.0, 5.0], [0.0, 3.0, 3.0, -1.0, 3.0]])
    for op, call, run in [
            ("topk", "torch.topk(x, 3)", lambda t: torch.topk(t, 3)),
            ("topk_smallest", "torch.topk(x, 2, largest=False)", lambda t: torch.topk(t, 2, largest=False)),
            ("kthvalue", "torch.kthvalue(x, 2, 1)", lambda t: torch.kthvalue(t, 2, 1)),
            ("median", "torch.median(x, 1)", lambda t: torch.median(t, 1))]:
        def picked(t, run=run):
            v, i = run(t)
            return v, torch.gather(t, 1, i.reshape(3, -1)).reshape(i.shape)
        s.case(G, f"ties.{op}", f"{call} over ties: values and x.gather(indices)", "ties", {"op": op}, [ties], picked)
    # repeat and tile.
    for name, shape, reps in [("vec", [3], [2]), ("vec_pad", [3], [2, 2]), ("mat", [2, 3], [2, 1]),
                              ("mat_pad", [2, 3], [1, 2, 3]), ("zero", [2, 3], [0, 2]), ("ones", [2, 3], [1, 1]),
                              ("scalar", [], [3, 2])]:
        x = s.randn(*shape)
        s.case(G, f"repeat.{name}", f"x{shape}.repeat({reps})", "repeat", {"repeats": reps, "tile": False}, [x],
               lambda t, r=reps: t.repeat(*r), grad=(0,))
    s.case(G, "repeat.short_raises", "x[2, 3].repeat(2)", "repeat", {"repeats": [2], "tile": False}, [s.randn(2, 3)],
           lambda t: t.repeat(2))
    s.case(G, "repeat.negative_raises", "x[3].repeat(2, -1)", "repeat", {"repeats": [2, -1], "tile": False},
           [s.randn(3)], lambda t: t.repeat(2, -1))
    for name, shape, reps in [("short", [2, 3], [2]), ("long", [3], [2, 2]), ("same", [2, 3], [2, 3])]:
        x = s.randn(*shape)
        s.case(G, f"tile.{name}", f"x{shape}.tile({reps})", "repeat", {"repeats": reps, "tile": True}, [x],
               lambda t, r=reps: t.tile(r), grad=(0,))
    s.case(G, "repeat.int64", "int64 x.repeat(2, 2)", "repeat", {"repeats": [2, 2], "tile": False},
           [s.randint(0, 9, (2, 2))], lambda t: t.repeat(2, 2))
    # as_strided of a non-contiguous view: sizes and strides address the storage.
    x = s.randn(3, 4)
    for name, chain in [("t_as_strided", [["t"], ["as_strided", [2, 2], [1, 4], 1]]),
                        ("t_overlap", [["t"], ["as_strided", [3, 3], [1, 1], 0]]),
                        ("narrow_before", [["narrow", 0, 1, 2], ["as_strided", [2, 3], [4, 1], 0]]),
                        ("expand_as_strided", [["narrow", 0, 0, 1], ["expand", [3, 4]], ["as_strided", [2, 2], [1, 1], 0]]),
                        ("slice_as_strided", [["slice", 1, 0, 4, 2], ["as_strided", [3], [4], 1]])]:
        s.case(G, f"as_strided.{name}", f"x.{chain}", "view_chain", {"chain": chain}, [x],
               lambda t, c=chain: apply_view_chain(t, c).contiguous() * 1.0, grad=(0,))
    # prod over a slice holding both inf and 0 (the product is NaN; each gradient the product of
    # the others), and with a single zero next to inf.
    for name, v in [("inf_zero", [math.inf, 0.0, 2.0]), ("inf_zero_zero", [math.inf, 0.0, 0.0, 3.0]),
                    ("ninf_zero", [-math.inf, 2.0, 0.0]), ("inf_only", [math.inf, 2.0, -1.0])]:
        s.case(G, f"prod.{name}", f"torch.prod({v})", "reduce", {"op": "prod", "dim": None, "keepdim": False},
               [torch.tensor(v)], lambda t: torch.prod(t), grad=(0,))
        s.case(G, f"prod_dim.{name}", f"torch.prod([{v}, reversed], 1)", "reduce",
               {"op": "prod", "dim": [1], "keepdim": False}, [torch.tensor([v, v[::-1]])],
               lambda t: torch.prod(t, 1), grad=(0,))
    # scatter_reduce's gradients for every reduction, with and without self, zeros for prod and
    # ties for amax/amin.
    ind = torch.tensor([[0, 1, 2, 0], [1, 2, 0, 1], [0, 0, 2, 2]])
    base = s.randn(3, 4)
    src = s.randn(3, 4)
    tied_src = src.clone()
    tied_src[2, 0] = tied_src[0, 0]
    zero_src = src.clone()
    zero_src[0, 1] = 0.0
    zero_base = base.clone()
    zero_base[1, 1] = 0.0
    for red in ["sum", "prod", "mean", "amax", "amin"]:
        for incl in [True, False]:
            for sname, a, v in [("rand", base, src), ("ties", base, tied_src), ("zeros", zero_base, zero_src)]:
                s.case(G, f"scatter_reduce.{red}.self{int(incl)}.{sname}",
                       f"torch.scatter_reduce(x, 0, idx, src[{sname}], '{red}', include_self={incl})",
                       "scatter_reduce", {"dim": 0, "reduce": red, "include_self": incl}, [a, ind, v],
                       lambda a, i, v, red=red, incl=incl: torch.scatter_reduce(a, 0, i, v, red, include_self=incl),
                       grad=(0, 2))
    # binary cross-entropy's gradient with respect to the target, at p in {0, 1}: the logs
    # clamped at -100.
    p = torch.tensor([0.0, 1.0, 0.5, 0.2, 1.0, 0.0, 0.999])
    y = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.3])
    for red in ["none", "mean", "sum"]:
        s.case(G, f"bce.target_grad.{red}", f"F.binary_cross_entropy(p, y, reduction='{red}'), d/dy too", "bce",
               {"reduction": red}, [p, y], lambda a, b, red=red: F.binary_cross_entropy(a, b, reduction=red),
               grad=(0, 1))


# ---------------------------------------------------------------- every dtype
ALL_DTYPES = [BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64]


def dtype_sample(dt, nonzero=False):
    """Small values every dtype holds exactly: both signs where the dtype has them, a zero
    unless `nonzero` (integer divisors), fractions for the floats."""
    if dt == BOOL:
        return torch.tensor([True, False, True, True] if nonzero else [True, False, False, True])
    if dt == U8:
        return torch.tensor([1, 2, 3, 7, 5, 250] if nonzero else [0, 1, 2, 3, 7, 250], dtype=U8)
    if not dt.is_floating_point:
        return torch.tensor([1, -2, 3, -1, 5, 2] if nonzero else [0, 1, -2, 3, -1, 5], dtype=dt)
    return torch.tensor([-2.5, -1.0, 0.5, 1.0, 3.0, 0.25] if nonzero else [-2.5, -1.0, 0.0, 0.5, 1.0, 3.0], dtype=dt)


def dtypes(s):
    """Every op over every dtype PyTorch takes (bool, uint8, int8..int64, the four floats):
    the result's dtype and values, or that PyTorch refuses. The unary, binary and reduction
    rows come from the op table, so a new row is swept with no edit here."""
    G = "dtypes"
    rows = table_rows()
    internal = {"relu_backward", "trunc_divide"}  # rows only other ops call
    unary = UNARY + list(ACTIVATIONS)
    binary = [r["name"] for r in rows if r["kind"] == "Binary" and r["name"] not in internal]
    for dt in ALL_DTYPES:
        x = dtype_sample(dt)
        tol = {"rtol": 1e-2, "atol": 1e-2} if dt in (F16, BF16) else {"rtol": 1e-5, "atol": 1e-6}
        for op in unary:
            if op in ACTIVATIONS:
                s.case(G, f"{op}.{dtype_name(dt)}", f"{op}({dtype_name(dt)} x)", "activation",
                       dict(ACT_ATTRS[op], op=op.replace("gelu_tanh", "gelu")), [x], ACTIVATIONS[op], **tol)
            else:
                s.case(G, f"{op}.{dtype_name(dt)}", f"torch.{op}({dtype_name(dt)} x)", "unary", {"op": op}, [x],
                       torch_fn(op), **tol)
        y = dtype_sample(dt, nonzero=True)
        for op in binary:
            s.case(G, f"{op}.{dtype_name(dt)}", f"torch.{op}({dtype_name(dt)} a, {dtype_name(dt)} b)", "binary",
                   {"op": op}, [x, y], lambda a, b, op=op: getattr(torch, op)(a, b), **tol)
        for op in ["add", "sub", "mul", "div"]:
            for kind, v in [("int", 2), ("float", 0.5)]:
                s.case(G, f"{op}.{dtype_name(dt)}.{kind}_number", f"torch.{op}({dtype_name(dt)} x, {v!r})",
                       "binary_scalar", {"op": op, "scalar": v, "kind": kind}, [x],
                       lambda a, op=op, v=v: getattr(torch, op)(a, v), **tol)
        for e in [2, 0.5, -1]:
            s.case(G, f"pow.{dtype_name(dt)}.exponent{e}", f"torch.pow({dtype_name(dt)} x, {e!r})", "pow_scalar",
                   {"exponent": e, "kind": "int" if isinstance(e, int) else "float"}, [y],
                   lambda a, e=e: torch.pow(a, e), **tol)
        s.case(G, f"clamp.{dtype_name(dt)}", f"torch.clamp({dtype_name(dt)} x, 1, 3)", "clamp",
               {"min": 1, "max": 3, "kind": "int"}, [x], lambda a: torch.clamp(a, 1, 3), **tol)
        s.case(G, f"where.{dtype_name(dt)}", f"torch.where(cond, {dtype_name(dt)} a, {dtype_name(dt)} b)", "where",
               {}, [x > x.flip(0) if dt != BOOL else x, x, y], lambda c, a, b: torch.where(c, a, b), **tol)
        m = torch.stack([x, y])
        for op in ["sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "all", "any", "logsumexp", "var",
                   "std", "max_all", "min_all", "cumsum", "cumprod", "median_all"]:
            attrs = {"op": op, "dim": [1] if op in ("cumsum", "cumprod") else None, "keepdim": False}
            if op in ("var", "std"):
                attrs["correction"] = 1
            def run(t, op=op):
                if op in ("max_all", "min_all"):
                    return getattr(torch, op[:3])(t)
                if op == "median_all":
                    return torch.median(t)
                if op in ("cumsum", "cumprod"):
                    return getattr(torch, op)(t, 1)
                if op == "logsumexp":
                    return torch.logsumexp(t, dim=(0, 1))
                return getattr(torch, op)(t)
            s.case(G, f"{op}.{dtype_name(dt)}", f"torch.{op}({dtype_name(dt)} [2, 6])", "reduce", attrs, [m], run,
                   **tol)
        for op in ["max_dim", "min_dim", "median_dim"]:
            s.case(G, f"{op}.{dtype_name(dt)}", f"torch.{op[:-4]}({dtype_name(dt)} [2, 6], 1)", "reduce",
                   {"op": op, "dim": [1], "keepdim": False}, [m],
                   lambda t, op=op: tuple(getattr(torch, op[:-4])(t, 1)), **tol)
        s.case(G, f"kthvalue.{dtype_name(dt)}", f"torch.kthvalue({dtype_name(dt)} [2, 6], 2, 1)", "reduce",
               {"op": "kthvalue", "k": 2, "dim": [1], "keepdim": False}, [m], lambda t: tuple(torch.kthvalue(t, 2, 1)),
               **tol)
        s.case(G, f"norm.{dtype_name(dt)}", f"torch.linalg.vector_norm({dtype_name(dt)} x)", "reduce",
               {"op": "norm", "p": 2.0, "dim": None, "keepdim": False}, [x],
               lambda t: torch.linalg.vector_norm(t), **tol)
        for row in [r for r in rows if r["api"] == "FnDim"]:
            s.case(G, f"{row['name']}.{dtype_name(dt)}", f"torch.{row['name']}({dtype_name(dt)} [2, 6], 1)", "dim_op",
                   {"op": row["name"], "dim": 1}, [m], lambda t, f=torch_fn(row["name"]): f(t, 1), **tol)
        for op in ["sort", "topk"]:
            attrs = {"descending": False} if op == "sort" else {"k": 2, "largest": True}
            s.case(G, f"{op}.{dtype_name(dt)}", f"torch.{op}({dtype_name(dt)} distinct values)", op, attrs,
                   [torch.tensor([3, 1, 2, 0, 5]).to(dt) if dt != BOOL else torch.tensor([True, False])],
                   (lambda t: tuple(torch.sort(t))) if op == "sort" else (lambda t: tuple(torch.topk(t, min(2, t.numel())))),
                   **tol)
        for fn, run in [("softmax", lambda t: torch.softmax(t, 1)), ("log_softmax", lambda t: torch.log_softmax(t, 1))]:
            s.case(G, f"{fn}.{dtype_name(dt)}", f"torch.{fn}({dtype_name(dt)} [2, 6], 1)", "dim_op",
                   {"op": fn, "dim": 1}, [m], run, **tol)


# ---------------------------------------------------------------- factories
def factories(s):
    cases = [
        ("full.int", "torch.full((2,), 3)", {"op": "full", "size": [2], "value": 3, "kind": "int"},
         lambda: torch.full((2,), 3)),
        ("full.float", "torch.full((2,), 3.5)", {"op": "full", "size": [2], "value": 3.5, "kind": "float"},
         lambda: torch.full((2,), 3.5)),
        ("full.bool", "torch.full((2,), True)", {"op": "full", "size": [2], "value": True, "kind": "bool"},
         lambda: torch.full((2,), True)),
        ("tensor.ints", "torch.tensor([1, 2, 3])", {"op": "tensor", "values": [1, 2, 3], "kind": "int"},
         lambda: torch.tensor([1, 2, 3])),
        ("tensor.floats", "torch.tensor([1., 2.5])", {"op": "tensor", "values": [1.0, 2.5], "kind": "float"},
         lambda: torch.tensor([1.0, 2.5])),
        ("tensor.bools", "torch.tensor([True, False])", {"op": "tensor", "values": [True, False], "kind": "bool"},
         lambda: torch.tensor([True, False])),
        ("arange.int", "torch.arange(5)", {"op": "arange", "start": 0, "end": 5, "step": 1, "kind": "int"},
         lambda: torch.arange(5)),
        ("arange.float_step", "torch.arange(0, 1, 0.25)", {"op": "arange", "start": 0, "end": 1, "step": 0.25,
                                                            "kind": "float"}, lambda: torch.arange(0, 1, 0.25)),
        ("arange.neg", "torch.arange(5, 0, -2)", {"op": "arange", "start": 5, "end": 0, "step": -2, "kind": "int"},
         lambda: torch.arange(5, 0, -2)),
        ("linspace", "torch.linspace(-1, 1, 5)", {"op": "linspace", "start": -1.0, "end": 1.0, "steps": 5},
         lambda: torch.linspace(-1, 1, 5)),
        ("linspace.one", "torch.linspace(2, 3, 1)", {"op": "linspace", "start": 2.0, "end": 3.0, "steps": 1},
         lambda: torch.linspace(2, 3, 1)),
        ("eye", "torch.eye(2, 3)", {"op": "eye", "n": 2, "m": 3}, lambda: torch.eye(2, 3)),
        ("zeros", "torch.zeros(2, 0)", {"op": "zeros", "size": [2, 0]}, lambda: torch.zeros(2, 0)),
        ("ones_like_int", "torch.ones_like(int tensor)", {"op": "ones_like"}, None),
        ("full_like_float_into_int", "torch.full_like(int tensor, 2.7)", {"op": "full_like", "value": 2.7}, None),
    ]
    for name, call, attrs, fn in cases:
        if fn is None:
            t = torch.tensor([1, 2, 3])
            f = (lambda a: torch.ones_like(a)) if attrs["op"] == "ones_like" else (lambda a: torch.full_like(a, 2.7))
            s.case("factories", name, call, "factory", attrs, [t], f)
        else:
            s.case("factories", name, call, "factory", attrs, [], fn)


# ---------------------------------------------------------------- layer options, round two
def pool1d_layers2(s, g):
    # 1-D pooling over [N, C, L] and [C, L]: max (dilation, ceil_mode, indices, ties, NaN), avg
    # (ceil_mode, count_include_pad), adaptive avg (even and uneven windows).
    ties = torch.tensor([[[1.0, 3.0, 3.0, 0.0, 2.0, 2.0, -1.0]]])
    nans = torch.tensor([[[1.0, math.nan, 3.0, math.nan, 2.0, 0.5]]])
    cases = [  # (name, fn, x, kwargs)
        ("max.k3", "max", s.randn(2, 3, 9), dict(kernel_size=3)),
        ("max.k3s2p1.ceil", "max", s.randn(2, 3, 10), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        ("max.dil2", "max", s.randn(1, 2, 11), dict(kernel_size=3, stride=1, dilation=2)),
        ("max.ties", "max", ties, dict(kernel_size=2, stride=1)),
        ("max.nans", "max", nans, dict(kernel_size=3, stride=1, padding=1)),
        ("max.unbatched", "max", s.randn(3, 8), dict(kernel_size=2)),
        ("max.indices", "max_indices", s.randn(2, 2, 9), dict(kernel_size=3, stride=2, padding=1)),
        ("avg.k3", "avg", s.randn(2, 3, 9), dict(kernel_size=3)),
        ("avg.k3s2p1.ceil.cip0", "avg", s.randn(2, 3, 10),
         dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
        ("avg.k4s3p2.cip1", "avg", s.randn(1, 2, 11), dict(kernel_size=4, stride=3, padding=2)),
        ("avg.unbatched", "avg", s.randn(3, 7), dict(kernel_size=2, ceil_mode=True)),
        ("adaptive.even", "adaptive", s.randn(2, 3, 12), dict(output_size=4)),
        ("adaptive.uneven", "adaptive", s.randn(2, 3, 10), dict(output_size=4)),
        ("adaptive.unbatched", "adaptive", s.randn(3, 5), dict(output_size=3)),
        ("max.padding_over_half_raises", "max", s.randn(1, 1, 8), dict(kernel_size=2, padding=2)),
        ("avg.rank4_raises", "avg", s.randn(1, 1, 2, 8), dict(kernel_size=2)),
    ]
    for name, fn, x, kw in cases:
        def run(t, fn=fn, kw=kw):
            if fn == "max":
                return F.max_pool1d(t, **kw)
            if fn == "max_indices":
                return tuple(F.max_pool1d(t, return_indices=True, **kw))
            if fn == "avg":
                return F.avg_pool1d(t, **kw)
            return F.adaptive_avg_pool1d(t, **kw)
        s.case(g, f"pool1d.{name}", f"F.{fn}_pool1d(x {list(x.shape)}, {kw})", "pool1d", dict(kw, fn=fn), [x], run,
               grad=(0,))


def module_grads_case(s, g, name, call, fn, attrs, module, inputs, run, grad):
    """A module's case with its state dict (extra) and the gradients of every parameter for the
    case's upstream gradients of all outputs (pgrad.<name>)."""
    st = state(module)
    names = [k for k, _ in module.named_parameters()]
    s.case(g, name, call, fn, dict(attrs, params=names), inputs, run, grad=grad, rtol=1e-4, atol=1e-5, extra=st)
    record_param_grads(s, g, name, module, lambda: run(*inputs))


def transformer_layers2(s, g):
    # The encoder layer's src_mask, the decoder layer (self, cross attention, every mask), and
    # the encoder and decoder stacks with and without a final norm; dropout 0.
    E, H, FF, N, S, T = 8, 2, 12, 2, 5, 4
    causal = torch.triu(torch.full((T, T), -math.inf), diagonal=1)
    causal_bool_s = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
    src_kpm = torch.tensor([[False, False, False, True, True], [False, False, False, False, False]])
    tgt_kpm = torch.tensor([[False, False, True, False], [False, False, False, False]])
    mem_mask = s.randn(T, S)
    for norm_first in [False, True]:
        for act in ["relu", "gelu"]:
            for bf in [True, False]:
                tag = f"{'pre' if norm_first else 'post'}_{act}.bf{int(bf)}"
                opts = dict(dim_feedforward=FF, dropout=0.0, activation=act, norm_first=norm_first, batch_first=bf)
                attrs = {"dim": E, "heads": H, "ff": FF, "norm_first": norm_first, "gelu": act == "gelu",
                         "batch_first": bf}
                src = s.randn(N, S, E) if bf else s.randn(S, N, E)
                tgt = s.randn(N, T, E) if bf else s.randn(T, N, E)
                torch.manual_seed(21)
                enc = torch.nn.TransformerEncoderLayer(E, H, **opts).eval()
                module_grads_case(s, g, f"TransformerEncoderLayer.src_mask.{tag}",
                                  f"nn.TransformerEncoderLayer({E}, {H}, {opts})(src, src_mask=causal bool, "
                                  "src_key_padding_mask)", "transformer", dict(attrs, type="TransformerEncoderLayer"),
                                  enc, [src, causal_bool_s, src_kpm],
                                  lambda x, m, k, enc=enc: enc(x, src_mask=m, src_key_padding_mask=k), grad=(0,))
                torch.manual_seed(22)
                dec = torch.nn.TransformerDecoderLayer(E, H, **opts).eval()
                module_grads_case(s, g, f"TransformerDecoderLayer.{tag}",
                                  f"nn.TransformerDecoderLayer({E}, {H}, {opts})(tgt, memory, tgt_mask=causal, "
                                  "memory_mask, tgt_key_padding_mask, memory_key_padding_mask)", "transformer",
                                  dict(attrs, type="TransformerDecoderLayer"), dec, [tgt, src, causal, mem_mask, tgt_kpm,
                                                                                     src_kpm],
                                  lambda t, m, tm, mm, tk, mk, dec=dec: dec(t, m, tgt_mask=tm, memory_mask=mm,
                                                                            tgt_key_padding_mask=tk,
                                                                            memory_key_padding_mask=mk), grad=(0, 1))
    for final_norm in [False, True]:
        opts = dict(dim_feedforward=FF, dropout=0.0, batch_first=True)
        attrs = {"dim": E, "heads": H, "ff": FF, "norm_first": False, "gelu": False, "batch_first": True,
                 "layers": 2, "final_norm": final_norm}
        torch.manual_seed(23)
        norm = torch.nn.LayerNorm(E) if final_norm else None
        encs = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(E, H, **opts), 2, norm=norm,
                                           enable_nested_tensor=False).eval()
        with torch.no_grad():  # the deep-copied layers start equal: make them differ
            for p in encs.parameters():
                p.add_(s.randn(*p.shape) * 0.05)
        src = s.randn(N, S, E)
        module_grads_case(s, g, f"TransformerEncoder.l2.norm{int(final_norm)}",
                          f"nn.TransformerEncoder(layer, 2, norm={'LayerNorm' if final_norm else None})(src, mask, "
                          "src_key_padding_mask)", "transformer", dict(attrs, type="TransformerEncoder"), encs,
                          [src, causal_bool_s, src_kpm],
                          lambda x, m, k, encs=encs: encs(x, mask=m, src_key_padding_mask=k), grad=(0,))
        torch.manual_seed(24)
        decs = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(E, H, **opts), 2,
                                           norm=torch.nn.LayerNorm(E) if final_norm else None).eval()
        with torch.no_grad():
            for p in decs.parameters():
                p.add_(s.randn(*p.shape) * 0.05)
        tgt = s.randn(N, T, E)
        module_grads_case(s, g, f"TransformerDecoder.l2.norm{int(final_norm)}",
                          f"nn.TransformerDecoder(layer, 2, norm={'LayerNorm' if final_norm else None})(tgt, memory, "
                          "tgt_mask=causal)", "transformer", dict(attrs, type="TransformerDecoder"), decs,
                          [tgt, src, causal], lambda t, m, tm, decs=decs: decs(t, m, tgt_mask=tm), grad=(0, 1))


def layers2(s):
    g = "layers2"
    pool_layers2(s, g)
    pool1d_layers2(s, g)
    transformer_layers2(s, g)
    batchnorm_layers2(s, g)
    embedding_layers2(s, g)
    attention_layers2(s, g)


def pool_layers2(s, g):
    # avg_pool2d: ceil_mode (the last window starts inside the input or its left padding; with
    # count_include_pad its divisor counts the padding but not the overhang) and divisor_override.
    avg = [  # (name, input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
        ("ceil.k3s2", (1, 2, 6, 6), 3, 2, 0, True, True, None),
        ("ceil.k3s2p1.cip1", (2, 2, 6, 7), 3, 2, 1, True, True, None),
        ("ceil.k3s2p1.cip0", (2, 2, 6, 7), 3, 2, 1, True, False, None),
        ("ceil.k2s2p1.last_dropped.cip1", (1, 1, 5, 5), 2, 2, 1, True, True, None),
        ("ceil.k2s2p1.last_dropped.cip0", (1, 1, 5, 5), 2, 2, 1, True, False, None),
        ("ceil.rect", (1, 3, 7, 5), (3, 2), (2, 3), (1, 0), True, True, None),
        ("ceil.rect.cip0", (1, 3, 7, 5), (3, 2), (2, 3), (1, 1), True, False, None),
        ("ceil.kernel_over_input", (1, 2, 1, 1), 2, 2, 0, True, True, None),
        ("ceil.exact_fit", (1, 1, 6, 6), 2, 2, 0, True, True, None),
        ("divisor2", (1, 2, 5, 5), 2, 2, 0, False, True, 2),
        ("divisor-3.p1", (1, 2, 5, 5), 3, 2, 1, False, True, -3),
        ("divisor5.cip0", (1, 2, 5, 5), 3, 2, 1, False, False, 5),
        ("divisor7.ceil", (2, 1, 6, 6), 3, 2, 1, True, False, 7),
        ("unbatched.ceil", (2, 5, 5), 2, 2, 1, True, False, None),
        ("divisor0_raises", (1, 1, 4, 4), 2, 2, 0, False, True, 0),
        ("padding_over_half_raises", (1, 1, 5, 5), 2, 2, 2, True, True, None),
        ("too_small_raises", (1, 1, 2, 2), 3, 1, 0, False, True, None),
        ("rank2_raises", (5, 5), 2, 2, 0, True, True, None),
    ]
    for name, shape, k, st, pad, ceil, cip, div in avg:
        attrs = {"kernel": _pair(k), "stride": _pair(st), "padding": _pair(pad), "ceil_mode": ceil,
                 "count_include_pad": cip, "divisor_override": div}
        call = (f"F.avg_pool2d(x {list(shape)}, {k}, stride={st}, padding={pad}, ceil_mode={ceil}, "
                f"count_include_pad={cip}, divisor_override={div})")
        s.case(g, f"avg_pool2d.{name}", call, "avg_pool2d", attrs, [s.randn(*shape)],
               lambda x, k=k, st=st, pad=pad, ceil=ceil, cip=cip, div=div: F.avg_pool2d(
                   x, k, st, pad, ceil_mode=ceil, count_include_pad=cip, divisor_override=div), grad=(0,))
    s.case(g, "avg_pool2d.float64.ceil", "F.avg_pool2d(float64 x, 3, 2, 1, ceil_mode=True)", "avg_pool2d",
           {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": True, "count_include_pad": True,
            "divisor_override": None}, [s.randn(1, 2, 6, 6, dtype=F64)],
           lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), grad=(0,), rtol=1e-10, atol=1e-12)

    # max_pool2d: dilation and return_indices (flat positions in each [H, W] plane, int64).
    ties = torch.tensor([[1.0, 3.0, 3.0, 0.0, 2.0], [3.0, 1.0, 2.0, 2.0, 0.0], [0.0, 3.0, 3.0, 1.0, 1.0],
                         [2.0, 2.0, 0.0, 3.0, 3.0], [1.0, 0.0, 3.0, 2.0, 2.0]]).reshape(1, 1, 5, 5)
    neg_inf = s.randn(1, 2, 5, 5)
    neg_inf[0, 0, :3, :3] = -math.inf  # windows over the padding that cover only -inf
    nan_in = s.randn(1, 1, 4, 4)
    nan_in[0, 0, 1, 2] = math.nan
    two_nans = nan_in.clone()
    two_nans[0, 0, 2, 1] = math.nan
    mx = [  # (name, input, kernel, stride, padding, dilation, ceil_mode)
        ("dil2", s.randn(1, 2, 7, 7), 3, 1, 0, 2, False),
        ("dil2.p1.s2", s.randn(2, 2, 8, 8), 3, 2, 1, 2, False),
        ("dil_rect", s.randn(1, 2, 6, 8), (2, 3), (1, 2), (1, 1), (2, 1), False),
        ("dil3.k2.p1", s.randn(1, 1, 7, 7), 2, 2, 1, 3, False),
        ("dil2.ceil", s.randn(1, 2, 8, 9), 3, 2, 1, 2, True),
        ("ceil.k2s2", s.randn(1, 2, 5, 5), 2, 2, 0, 1, True),
        ("ceil.kernel_over_input", s.randn(1, 1, 1, 1), 3, 3, 0, 1, True),
        ("overlap.ties", ties, 3, 1, 1, 1, False),
        ("ties.dil2", ties, 2, 1, 0, 2, False),
        ("all_neg_inf_windows", neg_inf, 3, 2, 1, 1, False),
        ("one_nan", nan_in, 2, 1, 0, 1, False),
        ("two_nans", two_nans, 2, 1, 0, 1, False),  # the window's last NaN, as PyTorch's kernel
        ("unbatched.dil2", s.randn(2, 6, 6), 2, 2, 1, 2, False),
        ("dil0_raises", s.randn(1, 1, 5, 5), 2, 1, 0, 0, False),
        ("padding_over_half_raises", s.randn(1, 1, 7, 7), 2, 1, 2, 3, False),
        ("dilated_too_small_raises", s.randn(1, 1, 4, 4), 3, 1, 0, 2, False),
    ]
    for name, x, k, st, pad, dil, ceil in mx:
        for ri in [False, True]:
            attrs = {"kernel": _pair(k), "stride": _pair(st), "padding": _pair(pad), "dilation": _pair(dil),
                     "ceil_mode": ceil, "return_indices": ri}
            s.case(g, f"max_pool2d.{name}.idx{int(ri)}",
                   f"F.max_pool2d(x {list(x.shape)}, {k}, {st}, {pad}, dilation={dil}, ceil_mode={ceil}, "
                   f"return_indices={ri})", "max_pool2d", attrs, [x],
                   lambda x, k=k, st=st, pad=pad, dil=dil, ceil=ceil, ri=ri: F.max_pool2d(
                       x, k, st, pad, dil, ceil_mode=ceil, return_indices=ri), grad=(0,))

    # max_unpool2d: the pooled values written back at their indices; output_size within a
    # stride of the default size. PyTorch calls its kernel nondeterministic (indices that repeat
    # write in any order; these cases have none that differ in value).
    torch.use_deterministic_algorithms(False)
    unpool = [  # (name, input shape, pool kernel, stride, padding, output_size)
        ("k2", (1, 2, 4, 4), 2, 2, 0, None),
        ("k2.size5", (1, 2, 5, 5), 2, 2, 0, [5, 5]),
        ("k2.size5.nchw", (2, 1, 5, 5), 2, 2, 0, [2, 1, 5, 5]),
        ("k3s2p1.default_size_raises", (1, 2, 6, 6), 3, 2, 1, None),
        ("k3s2p1.size7", (1, 1, 7, 7), 3, 2, 1, [7, 7]),
        ("rect", (1, 2, 6, 9), (2, 3), (2, 3), 0, [7, 10]),
        ("unbatched", (2, 4, 4), 2, 2, 0, None),
        ("size_over_stride_raises", (1, 1, 4, 4), 2, 2, 0, [6, 6]),
        ("size_under_stride_raises", (1, 1, 4, 4), 2, 2, 0, [2, 4]),
        ("size_len3_raises", (1, 1, 4, 4), 2, 2, 0, [1, 4, 4]),
        ("index_outside_raises", (1, 1, 5, 5), 2, 2, 0, [3, 3]),
    ]
    for name, shape, k, st, pad, size in unpool:
        xin = s.randn(*shape)
        pooled, idx = F.max_pool2d(xin, k, st, pad, return_indices=True)
        if name == "index_outside_raises":
            idx = torch.full_like(idx, 8)
            idx[..., -1, -1] = 9  # the output plane is 3 x 3 (indices 0-8)
        attrs = {"kernel": _pair(k), "stride": _pair(st), "padding": _pair(pad), "output_size": size}
        s.case(g, f"max_unpool2d.{name}", f"F.max_unpool2d(y, i, {k}, {st}, {pad}, output_size={size}) of "
               f"F.max_pool2d(x {list(shape)}, return_indices=True)", "max_unpool2d", attrs, [pooled, idx],
               lambda y, i, k=k, st=st, pad=pad, size=size: F.max_unpool2d(y, i, k, st, pad, output_size=size),
               grad=(0,))
    y, i = F.max_pool2d(s.randn(1, 1, 4, 4), 2, return_indices=True)
    for name, yy, ii in [("int32_indices_raises", y, i.int()), ("indices_shape_raises", y, i[..., :1])]:
        s.case(g, f"max_unpool2d.{name}", f"F.max_unpool2d(y, {name.split('_raises')[0]}, 2)", "max_unpool2d",
               {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0], "output_size": None}, [yy, ii],
               lambda a, b: F.max_unpool2d(a, b, 2))
    for name, shape, k, st, pad, dil, ceil in [("k2", (2, 2, 6, 6), 2, 2, 0, 1, False),
                                               ("k3s2p1.ceil", (1, 2, 7, 7), 3, 2, 1, 1, True),
                                               ("k3s1.overlap", (1, 1, 5, 5), 3, 1, 1, 1, False),
                                               ("dil2", (1, 2, 7, 7), 2, 2, 1, 2, False)]:
        attrs = {"kernel": _pair(k), "stride": _pair(st), "padding": _pair(pad), "dilation": _pair(dil),
                 "ceil_mode": ceil}

        def roundtrip(x, k=k, st=st, pad=pad, dil=dil, ceil=ceil):
            yy, ii = F.max_pool2d(x, k, st, pad, dil, ceil_mode=ceil, return_indices=True)
            return F.max_unpool2d(yy, ii, k, st, pad, output_size=x.shape[-2:])
        s.case(g, f"pool_unpool.{name}", f"F.max_unpool2d(*F.max_pool2d(x {list(shape)}, {k}, {st}, {pad}, {dil}, "
               f"ceil_mode={ceil}, return_indices=True), {k}, {st}, {pad}, output_size=x.shape[-2:])",
               "pool_unpool", attrs, [s.randn(*shape)], roundtrip, grad=(0,))

    torch.use_deterministic_algorithms(True)

    # The modules: MaxPool2d(dilation, return_indices=True), AvgPool2d(ceil_mode, divisor_override).
    layer_case(s, "MaxPool2d.dil2.return_indices", "nn.MaxPool2d(3, 2, 1, dilation=2, return_indices=True)",
               torch.nn.MaxPool2d(3, 2, 1, dilation=2, return_indices=True),
               {"type": "MaxPool2d", "kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "dilation": [2, 2],
                "ceil_mode": False, "return_indices": True}, s.randn(2, 2, 8, 8), group=g)
    layer_case(s, "MaxPool2d.dil2.ceil", "nn.MaxPool2d(2, 2, dilation=2, ceil_mode=True)",
               torch.nn.MaxPool2d(2, 2, dilation=2, ceil_mode=True),
               {"type": "MaxPool2d", "kernel": [2, 2], "stride": [2, 2], "padding": [0, 0], "dilation": [2, 2],
                "ceil_mode": True}, s.randn(1, 2, 8, 8), group=g)
    for ceil, div in [(True, None), (True, 3), (False, 2)]:
        layer_case(s, f"AvgPool2d.ceil{int(ceil)}.div{div}",
                   f"nn.AvgPool2d(3, 2, 1, ceil_mode={ceil}, count_include_pad=False, divisor_override={div})",
                   torch.nn.AvgPool2d(3, 2, 1, ceil_mode=ceil, count_include_pad=False, divisor_override=div),
                   {"type": "AvgPool2d", "kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": ceil,
                    "count_include_pad": False, "divisor_override": div}, s.randn(1, 2, 6, 6), group=g)


def _pair(v):
    return list(v) if isinstance(v, (tuple, list)) else [v, v]


def batchnorm_layers2(s, g):
    # momentum=None: the running statistics are a cumulative average (factor 1 / num_batches_tracked).
    configs = [  # (name, kind, features, momentum, batch shape, steps, start num_batches_tracked, track)
        ("1d.cma", "BatchNorm1d", 4, None, (6, 4), 3, 0, True),
        ("1d.cma.3d_input", "BatchNorm1d", 3, None, (4, 3, 5), 3, 0, True),
        ("2d.cma", "BatchNorm2d", 3, None, (4, 3, 2, 2), 3, 0, True),
        ("2d.cma.from_tracked4", "BatchNorm2d", 3, None, (2, 3, 3, 2), 3, 4, True),
        ("2d.momentum0.3", "BatchNorm2d", 3, 0.3, (4, 3, 2, 2), 3, 2, True),
        ("1d.cma.untracked", "BatchNorm1d", 4, None, (5, 4), 2, 0, False),
        ("1d.cma.one_value_raises", "BatchNorm1d", 4, None, (1, 4), 1, 0, True),
    ]
    for name, kind, c, mom, shape, steps, start, track in configs:
        torch.manual_seed(11)
        bn = getattr(torch.nn, kind)(c, momentum=mom, track_running_stats=track)
        with torch.no_grad():
            bn.weight.copy_(s.rand(c) + 0.5)
            bn.bias.copy_(s.randn(c))
            if track:
                bn.running_mean.copy_(s.randn(c))
                bn.running_var.copy_(s.rand(c) + 0.5)
                bn.num_batches_tracked.fill_(start)
        st = state(bn)
        xs = [s.randn(*shape) for _ in range(steps)] + [s.randn(*shape)]  # the last: one eval-mode batch

        def run(*xs, st=st, kind=kind, c=c, mom=mom, track=track):
            m = getattr(torch.nn, kind)(c, momentum=mom, track_running_stats=track)
            m.load_state_dict(st)
            m.train()
            ys = [m(x) for x in xs[:-1]]
            m.eval()
            ys.append(m(xs[-1]))
            if track:
                ys += [m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()]
            return tuple(ys), m
        pgrads = {}
        try:
            ys, m = run(*[x.clone() for x in xs])
            outs = list(ys[:steps + 1])
            gw, gb = torch.autograd.grad(outs, [m.weight, m.bias], [torch.ones_like(y) for y in outs])
            pgrads = {"pgrad.weight": gw, "pgrad.bias": gb}
        except (RuntimeError, ValueError):  # the case PyTorch refuses: no gradients
            pass
        extra = {f"state.{k}": v for k, v in st.items()}
        extra.update(pgrads)
        attrs = {"type": kind, "features": c, "momentum": mom, "steps": steps, "track": track}
        s.case(g, f"BatchNorm{name}", f"nn.{kind}({c}, momentum={mom}, track_running_stats={track}), "
               f"num_batches_tracked={start}: {steps} training batches, then one in eval mode; outputs, then "
               "running_mean, running_var, num_batches_tracked", "batchnorm_steps", attrs, xs,
               lambda *a: run(*a)[0], grad=tuple(range(len(xs))), rtol=1e-5, atol=1e-5, extra=extra)


def embedding_layers2(s, g):
    # max_norm: the looked-up rows of the weight are renormalised in place (embedding_renorm_).
    w = s.randn(7, 4) * 1.5
    cases = [  # (name, indices, max_norm, norm_type, padding_idx)
        ("l2", torch.tensor([0, 2, 2, 5, 6]), 1.0, 2.0, None),
        ("l2.2d_indices", torch.tensor([[1, 3, 1], [4, 0, 6]]), 1.5, 2.0, None),
        ("l1", torch.tensor([3, 1, 4, 1]), 2.0, 1.0, None),
        ("l3", torch.tensor([6, 5, 3]), 1.2, 3.0, None),
        ("linf", torch.tensor([0, 1, 2, 3]), 0.5, math.inf, None),
        ("padding_idx", torch.tensor([2, 0, 2, 4]), 1.0, 2.0, 2),
        ("padding_idx_negative", torch.tensor([2, 6, 6, 0]), 1.0, 2.0, -1),
        ("padding_idx_lowest", torch.tensor([0, 3, 0]), 100.0, 2.0, -7),
        ("padding_idx_past_end_raises", torch.tensor([0, 3]), 1.0, 2.0, 7),
        ("padding_idx_below_raises", torch.tensor([0, 3]), 1.0, 2.0, -8),
        ("none_over", torch.tensor([1, 2]), 100.0, 2.0, None),
        ("int32_indices", torch.tensor([5, 1, 5], dtype=I32), 0.8, 2.0, None),
        ("index_out_of_range_raises", torch.tensor([1, 7]), 1.0, 2.0, None),
        ("float_indices_raises", torch.tensor([1.0, 2.0]), 1.0, 2.0, None),
    ]
    for name, idx, mn, nt, pidx in cases:
        s.case(g, f"embedding.max_norm.{name}",
               f"F.embedding(i, w, padding_idx={pidx}, max_norm={mn}, norm_type={nt}); outputs the rows and w after",
               "embedding_renorm", {"max_norm": mn, "norm_type": nt, "padding_idx": pidx}, [idx, w],
               lambda i, ww, mn=mn, nt=nt, pidx=pidx: (
                   F.embedding(i, ww, padding_idx=pidx, max_norm=mn, norm_type=nt), ww.detach().clone()), grad=(1,))
    torch.manual_seed(12)
    emb = torch.nn.Embedding(6, 3, max_norm=1.0)
    layer_case(s, "Embedding.max_norm", "nn.Embedding(6, 3, max_norm=1.0)", emb,
               {"type": "Embedding", "num": 6, "dim": 3, "padding_idx": None, "max_norm": 1.0, "norm_type": 2.0},
               torch.tensor([[0, 1, 5], [1, 2, 2]]), group=g)
    emb = torch.nn.Embedding(6, 3, padding_idx=0, max_norm=0.7, norm_type=1.0)
    layer_case(s, "Embedding.max_norm.l1.padding_idx", "nn.Embedding(6, 3, padding_idx=0, max_norm=0.7, norm_type=1)",
               emb, {"type": "Embedding", "num": 6, "dim": 3, "padding_idx": 0, "max_norm": 0.7, "norm_type": 1.0},
               torch.tensor([0, 3, 4, 3]), group=g)
    emb = torch.nn.Embedding(6, 3, padding_idx=-2)
    layer_case(s, "Embedding.padding_idx_negative", "nn.Embedding(6, 3, padding_idx=-2)", emb,
               {"type": "Embedding", "num": 6, "dim": 3, "padding_idx": -2}, torch.tensor([[4, 1, 4], [0, 4, 5]]),
               group=g)


class _Attention(torch.nn.MultiheadAttention):
    """MultiheadAttention with its options fixed, taking the masks positionally (state dict keys unchanged)."""

    def __init__(self, *a, need_weights=True, average=True, kpm=False, mask=False, **kw):
        super().__init__(*a, **kw)
        self.opts = (need_weights, average, kpm, mask)

    def forward(self, q, k, v, *masks):
        need_weights, average, kpm, mask = self.opts
        masks = list(masks)
        key_padding_mask = masks.pop(0) if kpm else None
        attn_mask = masks.pop(0) if mask else None
        return super().forward(q, k, v, key_padding_mask=key_padding_mask, need_weights=need_weights,
                               attn_mask=attn_mask, average_attn_weights=average)


def attention_layers2(s, g):
    E, H, N, L, S = 8, 2, 2, 3, 4
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    bool3 = s.rand(N * H, L, S) < 0.4
    bool3[:, :, 0] = False  # every query keeps a key
    float3 = s.randn(N * H, L, S)
    float3[0, 1, 2] = -math.inf
    kpm = torch.tensor([[False, False, True, False], [False, True, True, False]])
    kpm_float = s.randn(N, S)
    all_rows = torch.zeros(L, S, dtype=torch.bool)
    all_rows[1] = True  # query 1 may attend to no key
    cases = [  # (name, batch_first, self-attention, need_weights, average, kpm, attn_mask)
        ("causal_bool2d", True, True, True, True, None, causal),
        ("float2d.no_weights", True, False, False, True, None, s.randn(L, S)),
        ("bool3d.per_head_weights", True, False, True, False, None, bool3),
        ("float3d_with_inf", True, False, True, True, None, float3),
        ("kpm_and_bool2d.seq_first", False, False, True, False, kpm, s.rand(L, S) < 0.3),
        ("kpm_and_float3d", False, False, False, True, kpm, float3),
        ("kpm_float", True, False, True, True, kpm_float, None),
        ("kpm_float_and_bool3d", True, False, True, False, kpm_float, bool3),
        ("no_masks.seq_first", False, True, True, True, None, None),
        ("weights_per_head", True, True, True, False, None, None),
        ("row_all_masked.weights_nan", True, False, True, True, None, all_rows),
        ("row_all_masked.no_weights_zero", True, False, False, True, None, all_rows),
        ("bad_2d_shape_raises", True, False, True, True, None, torch.zeros(L, L)),
        ("bad_3d_shape_raises", True, False, True, True, None, torch.zeros(H, L, S)),
        ("4d_mask_raises", True, False, False, True, None, torch.zeros(1, N * H, L, S)),
        ("int_mask_raises", True, False, True, True, None, torch.zeros(L, S, dtype=I64)),
        ("float64_mask_raises", True, False, True, True, None, torch.zeros(L, S, dtype=F64)),
        ("float64_mask_no_weights_raises", True, False, False, True, None, torch.zeros(L, S, dtype=F64)),
        ("bad_kpm_shape_raises", True, False, True, True, torch.zeros(N, S + 1, dtype=torch.bool), None),
        ("int_kpm_raises", True, False, True, True, torch.zeros(N, S, dtype=I64), None),
    ]
    # Unbatched: query [L, E], key and value [S, E], key_padding_mask [S], attn_mask [L, S] or
    # [heads, L, S].
    unbatched_bool = s.rand(L, S) < 0.3
    unbatched_bool[:, 0] = False
    unbatched = [
        ("unbatched.self", True, True, True, True, None, None),
        ("unbatched.kpm_bool2d.seq_first", False, False, True, False, torch.tensor([False, True, False, False]),
         unbatched_bool),
        ("unbatched.float3d_per_head", True, False, True, False, None, s.randn(H, L, S)),
        ("unbatched.no_weights", True, False, False, True, None, s.randn(L, S)),
        ("unbatched.batched_kpm_raises", True, False, True, True, torch.zeros(N, S, dtype=torch.bool), None),
    ]
    for name, bf, self_attn, nw, avg, kp, am in cases + unbatched:
        one = name.startswith("unbatched")
        torch.manual_seed(13)
        mha = _Attention(E, H, batch_first=bf, need_weights=nw, average=avg, kpm=kp is not None, mask=am is not None)
        with torch.no_grad():
            mha.in_proj_bias.copy_(s.randn(3 * E) * 0.1)
            mha.out_proj.bias.copy_(s.randn(E) * 0.1)
        s_len = L if self_attn else S
        shape_q = (L, E) if one else (N, L, E) if bf else (L, N, E)
        shape_k = (s_len, E) if one else (N, s_len, E) if bf else (s_len, N, E)
        q = s.randn(*shape_q)
        k = q if self_attn else s.randn(*shape_k)
        v = q if self_attn else s.randn(*shape_k)
        masks = [m for m in (kp, am) if m is not None]
        attrs = {"type": "MultiheadAttention", "dim": E, "heads": H, "batch_first": bf, "need_weights": nw,
                 "average_attn_weights": avg, "kpm": kp is not None, "attn_mask": am is not None}
        call = (f"nn.MultiheadAttention({E}, {H}, batch_first={bf})(q, k, v, key_padding_mask="
                f"{None if kp is None else f'{kp.dtype} {list(kp.shape)}'}, need_weights={nw}, attn_mask="
                f"{None if am is None else f'{am.dtype} {list(am.shape)}'}, average_attn_weights={avg})")
        layer_case(s, f"MultiheadAttention.{name}", call, mha, attrs, q, atol=1e-4, extra_inputs=(k, v, *masks),
                   group=g, grad_inputs=(0,) if self_attn else (0, 1, 2))


def ops3(s):
    g = "ops3"
    inf, nan = math.inf, math.nan

    def c(name, call, op, attrs, inputs, run, grad=(), **kw):
        s.case(g, name, call, "ops3", dict(attrs, op=op), inputs, run, grad=grad, **kw)

    # flip and roll.
    x = s.randn(3, 4, 5)
    for dims in [[0], [1, 2], [-1], [0, 1, 2], []]:
        c(f"flip.{dims}", f"torch.flip(x, {dims})", "flip", {"dims": dims}, [x],
          lambda a, d=dims: torch.flip(a, d), grad=(0,))
    c("flip.int64", "torch.flip(int64 x, [1])", "flip", {"dims": [1]}, [s.randint(-5, 5, (3, 4))],
      lambda a: torch.flip(a, [1]))
    c("flip.bool", "torch.flip(bool x, [0, 1])", "flip", {"dims": [0, 1]}, [s.randn(3, 4) > 0],
      lambda a: torch.flip(a, [0, 1]))
    c("flip.repeated_dim", "torch.flip(x, [0, -3])", "flip", {"dims": [0, -3]}, [x], lambda a: torch.flip(a, [0, -3]))
    x = s.randn(3, 4)
    for shifts, dims in [([1], [0]), ([-2], [1]), ([1, 7], [0, 1]), ([5], None), ([-13], None), ([0], [1]),
                         ([2, 3], [1, 1])]:
        c(f"roll.{shifts}.{dims}", f"torch.roll(x, {shifts}, {dims})", "roll", {"shifts": shifts, "dims": dims}, [x],
          lambda a, sh=shifts, d=dims: torch.roll(a, sh, d) if d is not None else torch.roll(a, sh), grad=(0,))
    c("roll.int64", "torch.roll(int64 x, [1], [1])", "roll", {"shifts": [1], "dims": [1]},
      [s.randint(-5, 5, (3, 4))], lambda a: torch.roll(a, [1], [1]))
    c("roll.misaligned", "torch.roll(x, [1, 2], [0])", "roll", {"shifts": [1, 2], "dims": [0]}, [x],
      lambda a: torch.roll(a, [1, 2], [0]))
    c("roll.two_shifts_no_dims", "torch.roll(x, [1, 2])", "roll", {"shifts": [1, 2], "dims": None}, [x],
      lambda a: torch.roll(a, [1, 2]))
    # tril and triu: NaN and inf above the diagonal become zeros.
    m = s.randn(4, 5)
    m[0, 3], m[1, 4], m[3, 0] = nan, inf, -inf
    for fn in ["tril", "triu"]:
        for diag in [0, 1, -2, 10, -10]:
            c(f"{fn}.d{diag}", f"torch.{fn}(x, {diag})", fn, {"diagonal": diag}, [m],
              lambda a, f=fn, d=diag: getattr(torch, f)(a, d), grad=(0,))
        c(f"{fn}.batched", f"torch.{fn}(x [2, 3, 4], 1)", fn, {"diagonal": 1}, [s.randn(2, 3, 4)],
          lambda a, f=fn: getattr(torch, f)(a, 1), grad=(0,))
        c(f"{fn}.bool", f"torch.{fn}(bool x)", fn, {"diagonal": 0}, [s.randn(3, 3) > 0],
          lambda a, f=fn: getattr(torch, f)(a))
        c(f"{fn}.int64", f"torch.{fn}(int64 x, -1)", fn, {"diagonal": -1}, [s.randint(-5, 5, (3, 4))],
          lambda a, f=fn: getattr(torch, f)(a, -1))
        c(f"{fn}.1d", f"torch.{fn}(x [4])", fn, {"diagonal": 0}, [s.randn(4)], lambda a, f=fn: getattr(torch, f)(a))
    # diff.
    x = s.randn(3, 5)
    for n, dim in [(1, -1), (2, 0), (3, 1), (0, 1), (7, 1)]:
        c(f"diff.n{n}.d{dim}", f"torch.diff(x, n={n}, dim={dim})", "diff", {"n": n, "dim": dim}, [x],
          lambda a, n=n, d=dim: torch.diff(a, n=n, dim=d), grad=(0,))
    c("diff.prepend_append", "torch.diff(x [3, 5], n=2, dim=1, prepend=p [3, 2], append=q [3, 1])", "diff",
      {"n": 2, "dim": 1, "prepend": True, "append": True}, [x, s.randn(3, 2), s.randn(3, 1)],
      lambda a, p_, q: torch.diff(a, n=2, dim=1, prepend=p_, append=q), grad=(0, 1, 2))
    c("diff.prepend", "torch.diff(x [3, 5], dim=0, prepend=p [1, 5])", "diff", {"n": 1, "dim": 0, "prepend": True},
      [x, s.randn(1, 5)], lambda a, p_: torch.diff(a, dim=0, prepend=p_), grad=(0, 1))
    c("diff.append_n0", "torch.diff(x [3, 5], n=0, append=q [3, 2])", "diff", {"n": 0, "dim": -1, "append": True},
      [x, s.randn(3, 2)], lambda a, q: torch.diff(a, n=0, append=q), grad=(0, 1))
    c("diff.append_int_float", "torch.diff(int64 x, append=float q)", "diff", {"n": 1, "dim": -1, "append": True},
      [torch.tensor([1, 4, 9]), torch.tensor([2.5])], lambda a, q: torch.diff(a, append=q))
    c("diff.prepend_rank", "torch.diff(x [3, 5], prepend=p [5])", "diff", {"n": 1, "dim": -1, "prepend": True},
      [x, s.randn(5)], lambda a, p_: torch.diff(a, prepend=p_))
    c("diff.prepend_size", "torch.diff(x [3, 5], prepend=p [2, 1])", "diff", {"n": 1, "dim": -1, "prepend": True},
      [x, s.randn(2, 1)], lambda a, p_: torch.diff(a, prepend=p_))
    c("diff.int64", "torch.diff(int64 x, n=2)", "diff", {"n": 2, "dim": -1}, [s.randint(-9, 9, (2, 5))],
      lambda a: torch.diff(a, n=2))
    c("diff.bool", "torch.diff(bool x)", "diff", {"n": 1, "dim": -1}, [torch.tensor([True, False, False, True, True])],
      lambda a: torch.diff(a))
    c("diff.special", "torch.diff(x with inf and NaN)", "diff", {"n": 1, "dim": -1},
      [torch.tensor([1.0, inf, inf, -inf, nan, 2.0])], lambda a: torch.diff(a))
    c("diff.scalar", "torch.diff(0-dim x)", "diff", {"n": 1, "dim": -1}, [torch.tensor(1.0)], lambda a: torch.diff(a))
    c("diff.negative_n", "torch.diff(x, n=-1)", "diff", {"n": -1, "dim": -1}, [x], lambda a: torch.diff(a, n=-1))
    # logaddexp.
    a, b = s.randn(3, 4) * 3, s.randn(3, 4) * 3
    b[0, :2] = a[0, :2]  # ties: half the gradient each
    c("logaddexp.random", "torch.logaddexp(a, b)", "logaddexp", {}, [a, b], torch.logaddexp, grad=(0, 1))
    c("logaddexp.broadcast", "torch.logaddexp(a [3, 1], b [4])", "logaddexp", {}, [s.randn(3, 1), s.randn(4)],
      torch.logaddexp, grad=(0, 1))
    c("logaddexp.large", "torch.logaddexp(a, b) at |a|, |b| ~ 1e3", "logaddexp", {},
      [torch.tensor([1000.0, -1000.0, 1000.0, 88.0]), torch.tensor([999.0, -1001.0, -1000.0, 89.0])],
      torch.logaddexp, grad=(0, 1))
    c("logaddexp.special", "torch.logaddexp(a, b) at inf and NaN", "logaddexp", {},
      [torch.tensor([inf, -inf, inf, -inf, nan, 0.0, inf, 2.0, -0.0]),
       torch.tensor([inf, -inf, -inf, 1.0, 0.0, nan, 1.0, -inf, 0.0])], torch.logaddexp)
    c("logaddexp.f64_f32", "torch.logaddexp(float64 a, float32 b)", "logaddexp", {},
      [s.randn(4, dtype=F64), s.randn(4)], torch.logaddexp, grad=(0, 1))
    c("logaddexp.int_float", "torch.logaddexp(float a, int64 b)", "logaddexp", {},
      [s.randn(3), torch.tensor([1, 2, 3])], torch.logaddexp, grad=(0,))
    c("logaddexp.int64", "torch.logaddexp(int64 a, int64 b)", "logaddexp", {},
      [torch.tensor([1, 2]), torch.tensor([1, 2])], torch.logaddexp)
    # nan_to_num.
    sp = torch.tensor([nan, inf, -inf, 1.5, -0.0, -2.0])
    for dt in [F32, F64, F16, BF16]:
        c(f"nan_to_num.{dtype_name(dt)}", f"torch.nan_to_num({dtype_name(dt)} x)", "nan_to_num", {}, [sp.to(dt)],
          torch.nan_to_num, grad=(0,) if dt in (F32, F64) else (), strict=True)
    c("nan_to_num.given", "torch.nan_to_num(x, nan=1.5, posinf=2.0, neginf=-3.0)", "nan_to_num",
      {"nan": 1.5, "posinf": 2.0, "neginf": -3.0}, [sp],
      lambda a: torch.nan_to_num(a, nan=1.5, posinf=2.0, neginf=-3.0), grad=(0,))
    c("nan_to_num.posinf_only", "torch.nan_to_num(x, posinf=7.0)", "nan_to_num", {"posinf": 7.0}, [sp],
      lambda a: torch.nan_to_num(a, posinf=7.0), grad=(0,))
    c("nan_to_num.int64", "torch.nan_to_num(int64 x)", "nan_to_num", {}, [torch.tensor([1, -2, 3])],
      torch.nan_to_num)
    c("nan_to_num.bool", "torch.nan_to_num(bool x)", "nan_to_num", {}, [torch.tensor([True, False])],
      torch.nan_to_num)
    # count_nonzero.
    x = s.randn(3, 4)
    x[x.abs() < 0.6] = 0.0
    x[0, 0], x[1, 1], x[2, 2] = nan, -0.0, inf
    for dims in [None, [0], [1], [0, 1], [-1]]:
        c(f"count_nonzero.{dims}", f"torch.count_nonzero(x, dim={dims})", "count_nonzero", {"dims": dims}, [x],
          lambda a, d=dims: torch.count_nonzero(a, dim=d))
    for name, t in [("int64", s.randint(-2, 3, (3, 4))), ("bool", s.randn(3, 4) > 0)]:
        c(f"count_nonzero.{name}", f"torch.count_nonzero({name} x, dim=1)", "count_nonzero", {"dims": [1]}, [t],
          lambda a: torch.count_nonzero(a, dim=1))
    c("count_nonzero.repeated_dim", "torch.count_nonzero(x, dim=(0, 0))", "count_nonzero", {"dims": [0, 0]}, [x],
      lambda a: torch.count_nonzero(a, dim=(0, 0)))
    # cummax and cummin: equal extremes take the last index, a NaN stays from its first index.
    ties = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, 0.0], [2.0, 2.0, 1.0, 1.0, 0.0, 0.0],
                         [1.0, nan, 5.0, nan, -inf, 9.0], [-inf, -inf, inf, inf, -0.0, 0.0]])
    for fn in ["cummax", "cummin"]:
        for dim in [1, 0, -1]:
            c(f"{fn}.random.d{dim}", f"torch.{fn}(x, {dim})", fn, {"dim": dim}, [s.randn(3, 5)],
              lambda a, f=fn, d=dim: getattr(torch, f)(a, d), grad=(0,))
        c(f"{fn}.ties", f"torch.{fn}(x with ties, NaN and infinities, 1)", fn, {"dim": 1}, [ties],
          lambda a, f=fn: getattr(torch, f)(a, 1), grad=(0,))
        c(f"{fn}.ties_dim0", f"torch.{fn}(x with ties, 0)", fn, {"dim": 0}, [ties[:2].t().contiguous()],
          lambda a, f=fn: getattr(torch, f)(a, 0), grad=(0,))
        c(f"{fn}.int64", f"torch.{fn}(int64 x, 1)", fn, {"dim": 1}, [torch.tensor([[1, 3, 3, 2], [4, 1, 4, 0]])],
          lambda a, f=fn: getattr(torch, f)(a, 1))
        c(f"{fn}.bool", f"torch.{fn}(bool x, 0)", fn, {"dim": 0}, [torch.tensor([True, False, True, False])],
          lambda a, f=fn: getattr(torch, f)(a, 0))
        c(f"{fn}.scalar", f"torch.{fn}(0-dim x, 0)", fn, {"dim": 0}, [torch.tensor(2.5)],
          lambda a, f=fn: getattr(torch, f)(a, 0), grad=(0,))
        c(f"{fn}.bad_dim", f"torch.{fn}(x, 2)", fn, {"dim": 2}, [s.randn(3, 5)],
          lambda a, f=fn: getattr(torch, f)(a, 2))
    # logit.
    c("logit.random", "torch.logit(x)", "logit", {"eps": None}, [s.rand(3, 4) * 0.98 + 0.01], torch.logit, grad=(0,))
    c("logit.outside", "torch.logit(x) at 0, 1 and outside [0, 1]", "logit", {"eps": None},
      [torch.tensor([0.0, 1.0, -0.5, 1.5, 0.3, nan])], torch.logit, grad=(0,))
    edges = torch.tensor([0.0, 0.1, 0.2, 0.5, 0.8, 0.9, 1.0, -1.0, 2.0])
    for eps in [0.2, 0.0, 1e-6, -0.5]:
        c(f"logit.eps{eps}", f"torch.logit(x, eps={eps})", "logit", {"eps": eps}, [edges],
          lambda a, e=eps: torch.logit(a, eps=e), grad=(0,))
    c("logit.f64", "torch.logit(float64 x, eps=0.25)", "logit", {"eps": 0.25}, [edges.to(F64)],
      lambda a: torch.logit(a, eps=0.25), grad=(0,))
    c("logit.int64", "torch.logit(int64 x)", "logit", {"eps": None}, [torch.tensor([0, 1, 2])], torch.logit)
    # searchsorted and bucketize.
    bounds = torch.tensor([1.0, 3.0, 3.0, 5.0, 7.0, 9.0])
    vals = torch.tensor([[0.0, 1.0, 2.0, 3.0], [9.0, 10.0, nan, -inf]])
    for right in [False, True]:
        for i32 in [False, True]:
            c(f"searchsorted.r{int(right)}.i{int(i32)}", f"torch.searchsorted(b, v, right={right}, out_int32={i32})",
              "searchsorted", {"right": right, "out_int32": i32}, [bounds, vals],
              lambda b, v, r=right, i=i32: torch.searchsorted(b, v, right=r, out_int32=i))
        c(f"searchsorted.nd.r{int(right)}", f"torch.searchsorted(b [2, 5], v [2, 3], right={right})", "searchsorted",
          {"right": right, "out_int32": False},
          [torch.sort(s.randint(0, 6, (2, 5)).to(F32), dim=1)[0], s.randint(-1, 7, (2, 3)).to(F32)],
          lambda b, v, r=right: torch.searchsorted(b, v, right=r))
        c(f"bucketize.r{int(right)}", f"torch.bucketize(x, b, right={right})", "bucketize",
          {"right": right, "out_int32": False}, [s.randint(0, 11, (3, 4)).to(F32), bounds],
          lambda x, b, r=right: torch.bucketize(x, b, right=r))
    c("searchsorted.int_bounds", "torch.searchsorted(int64 b, float v)", "searchsorted",
      {"right": False, "out_int32": False}, [torch.tensor([1, 2, 3]), torch.tensor([1.5, 2.0, 0.0])],
      lambda b, v: torch.searchsorted(b, v))
    c("searchsorted.scalar_value", "torch.searchsorted(b, 0-dim v)", "searchsorted",
      {"right": False, "out_int32": False}, [bounds, torch.tensor(4.0)], lambda b, v: torch.searchsorted(b, v))
    c("searchsorted.mismatch", "torch.searchsorted(b [2, 3], v [3, 2])", "searchsorted",
      {"right": False, "out_int32": False}, [torch.ones(2, 3), torch.ones(3, 2)], lambda b, v: torch.searchsorted(b, v))
    c("bucketize.2d_boundaries", "torch.bucketize(x, b [2, 3])", "bucketize", {"right": False, "out_int32": True},
      [torch.ones(3), torch.ones(2, 3)], lambda x, b: torch.bucketize(x, b, out_int32=True))
    # meshgrid.
    p, q, r = s.randn(3), s.randn(4), s.randn(2)
    for idx in ["ij", "xy"]:
        c(f"meshgrid.{idx}.2", f"torch.meshgrid(a [3], b [4], indexing='{idx}')", "meshgrid", {"indexing": idx},
          [p, q], lambda a, b, i=idx: torch.meshgrid(a, b, indexing=i), grad=(0, 1))
        c(f"meshgrid.{idx}.3", f"torch.meshgrid(a [3], b [4], c [2], indexing='{idx}')", "meshgrid",
          {"indexing": idx}, [p, q, r], lambda a, b, cc, i=idx: torch.meshgrid(a, b, cc, indexing=i), grad=(0, 1, 2))
        c(f"meshgrid.{idx}.1", f"torch.meshgrid(a [3], indexing='{idx}')", "meshgrid", {"indexing": idx}, [p],
          lambda a, i=idx: torch.meshgrid(a, indexing=i), grad=(0,))
    c("meshgrid.scalar", "torch.meshgrid(a [3], 0-dim b, indexing='ij')", "meshgrid", {"indexing": "ij"},
      [p, torch.tensor(2.0)], lambda a, b: torch.meshgrid(a, b, indexing="ij"), grad=(0, 1))
    c("meshgrid.int64", "torch.meshgrid(int64 a, int64 b, indexing='xy')", "meshgrid", {"indexing": "xy"},
      [torch.tensor([1, 2]), torch.tensor([3, 4, 5])], lambda a, b: torch.meshgrid(a, b, indexing="xy"))
    c("meshgrid.dtypes", "torch.meshgrid(float a, int64 b)", "meshgrid", {"indexing": "ij"},
      [p, torch.tensor([3, 4])], lambda a, b: torch.meshgrid(a, b, indexing="ij"))
    c("meshgrid.2d", "torch.meshgrid(a [2, 2])", "meshgrid", {"indexing": "ij"}, [torch.ones(2, 2)],
      lambda a: torch.meshgrid(a, indexing="ij"))
    c("meshgrid.bad_indexing", "torch.meshgrid(a, indexing='foo')", "meshgrid", {"indexing": "foo"}, [p],
      lambda a: torch.meshgrid(a, indexing="foo"))

    # ---- torch.nn.functional activations ----
    # Random values with the activations' corners (-3, -1, -0.5, 0, 0.5, 1, 3, 6) for the
    # gradients, and infinities, NaN and -0 for the values.
    corners = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, -2.0, 2.0])
    xr = torch.cat([s.randn(14) * 3, corners]).reshape(4, 6)
    xs = torch.tensor([-inf, inf, nan, -0.0, 0.0, 20.0, 21.0, 30.0, -20.0, -30.0, 88.0, -88.0, 1e-8, -1e-8])
    acts = [
        ("hardtanh", {}, lambda a: F.hardtanh(a)),
        ("hardtanh", {"min_val": -2.0, "max_val": 0.5}, lambda a: F.hardtanh(a, -2.0, 0.5)),
        ("relu6", {}, F.relu6),
        ("hardsigmoid", {}, F.hardsigmoid),
        ("mish", {}, F.mish),
        ("selu", {}, F.selu),
        ("celu", {}, lambda a: F.celu(a)),
        ("celu", {"alpha": 0.5}, lambda a: F.celu(a, 0.5)),
        ("softsign", {}, F.softsign),
        ("logsigmoid", {}, F.logsigmoid),
        ("hardshrink", {}, lambda a: F.hardshrink(a)),
        ("hardshrink", {"lambd": 1.0}, lambda a: F.hardshrink(a, 1.0)),
        ("softshrink", {}, lambda a: F.softshrink(a)),
        ("softshrink", {"lambd": 1.0}, lambda a: F.softshrink(a, 1.0)),
        ("softshrink", {"lambd": 0.0}, lambda a: F.softshrink(a, 0.0)),
        ("threshold", {"threshold": 0.5, "value": 2.5}, lambda a: F.threshold(a, 0.5, 2.5)),
        ("threshold", {"threshold": 0.0, "value": -1.0}, lambda a: F.threshold(a, 0.0, -1.0)),
    ]
    # softshrink's zero for a negative x inside [-lambd, lambd] is +0 from PyTorch's vectorised
    # loop and -0 from its scalar tail (which elements each takes depends on the CPU): its
    # cases have no such inputs (docs/conformance.md).
    no_neg_middle = {k: torch.where(torch.signbit(t) & (t >= -1.0), t.abs(), t) for k, t in [("random", xr),
                                                                                              ("special", xs)]}
    for op, attrs, fn in acts:
        tag = op + "".join(f".{k}{v}" for k, v in sorted(attrs.items()))
        xr_, xs_ = (no_neg_middle["random"], no_neg_middle["special"]) if op == "softshrink" else (xr, xs)
        c(f"{tag}.random", f"F.{op}(x, {attrs})", op, attrs, [xr_], fn, grad=(0,))
        c(f"{tag}.special", f"F.{op}(x at inf, NaN, -0 and large |x|, {attrs})", op, attrs, [xs_], fn, strict=True)
        c(f"{tag}.f64", f"F.{op}(float64 x, {attrs})", op, attrs, [xr_.to(F64)], fn, grad=(0,))
        c(f"{tag}.int64", f"F.{op}(int64 x, {attrs})", op, attrs, [torch.tensor([-4, -1, 0, 1, 3, 8])], fn)
    c("hardtanh.min_above_max", "F.hardtanh(x, 2.0, 1.0)", "hardtanh", {"min_val": 2.0, "max_val": 1.0}, [xr],
      lambda a: F.hardtanh(a, 2.0, 1.0))
    c("celu.alpha0", "F.celu(x, alpha=0)", "celu", {"alpha": 0.0}, [xr], lambda a: F.celu(a, 0.0))
    c("softshrink.negative_lambd", "F.softshrink(x, -0.5)", "softshrink", {"lambd": -0.5}, [xr],
      lambda a: F.softshrink(a, -0.5))
    # glu and softmin.
    x = s.randn(4, 6)
    for dim in [-1, 0, 1]:
        c(f"glu.d{dim}", f"F.glu(x [4, 6], {dim})", "glu", {"dim": dim}, [x], lambda a, d=dim: F.glu(a, d), grad=(0,))
        c(f"softmin.d{dim}", f"F.softmin(x [4, 6], {dim})", "softmin", {"dim": dim}, [x],
          lambda a, d=dim: F.softmin(a, d), grad=(0,))
    c("glu.odd", "F.glu(x [3])", "glu", {"dim": -1}, [s.randn(3)], lambda a: F.glu(a))
    c("glu.scalar", "F.glu(0-dim x)", "glu", {"dim": -1}, [torch.tensor(1.0)], lambda a: F.glu(a))
    c("glu.int64", "F.glu(int64 x)", "glu", {"dim": -1}, [torch.tensor([1, 2, 3, 4])], lambda a: F.glu(a))
    c("softmin.special", "F.softmin(x at inf, 1)", "softmin", {"dim": 1},
      [torch.tensor([[inf, 0.0, 1.0], [-inf, 0.0, 1.0]])], lambda a: F.softmin(a, 1))
    c("softmin.int64", "F.softmin(int64 x, 0)", "softmin", {"dim": 0}, [torch.tensor([1, 2])],
      lambda a: F.softmin(a, 0))
    # prelu.
    x4 = s.randn(2, 3, 4)
    x4[0, 0, :2] = 0.0
    c("prelu.shared", "F.prelu(x [2, 3, 4], w [1])", "prelu", {}, [x4, torch.tensor([0.25])], F.prelu, grad=(0, 1))
    c("prelu.channels", "F.prelu(x [2, 3, 4], w [3])", "prelu", {}, [x4, s.randn(3)], F.prelu, grad=(0, 1))
    c("prelu.2d", "F.prelu(x [5, 3], w [3])", "prelu", {}, [s.randn(5, 3), s.randn(3)], F.prelu, grad=(0, 1))
    c("prelu.1d", "F.prelu(x [5], w [1])", "prelu", {}, [s.randn(5), torch.tensor([-0.5])], F.prelu, grad=(0, 1))
    c("prelu.scalar_weight", "F.prelu(x [2, 3], 0-dim w)", "prelu", {}, [s.randn(2, 3), torch.tensor(0.1)], F.prelu,
      grad=(0, 1))
    c("prelu.special", "F.prelu(x at inf, NaN, -0, w [1] < 0)", "prelu", {}, [xs, torch.tensor([-0.5])], F.prelu,
      strict=True)
    c("prelu.mismatch", "F.prelu(x [2, 4], w [3])", "prelu", {}, [torch.ones(2, 4), torch.ones(3)], F.prelu)
    c("prelu.1d_many", "F.prelu(x [4], w [4])", "prelu", {}, [torch.ones(4), torch.ones(4)], F.prelu)
    c("prelu.2d_weight", "F.prelu(x [2, 4], w [1, 4])", "prelu", {}, [torch.ones(2, 4), torch.ones(1, 4)], F.prelu)
    c("prelu.int64", "F.prelu(int64 x, float w)", "prelu", {}, [torch.tensor([1, -2]), torch.ones(1)], F.prelu)

    # ---- distances ----
    x = s.randn(3, 5)
    x[1] = 0.0  # a zero row: the norm clamped at eps
    for p_, dim in [(2.0, 1), (1.0, 0), (3.0, -1), (inf, 1)]:
        c(f"normalize.p{p_}.d{dim}", f"F.normalize(x, p={p_}, dim={dim})", "normalize", {"p": p_, "dim": dim}, [x],
          lambda a, p_=p_, d=dim: F.normalize(a, p=p_, dim=d), grad=(0,))
    c("normalize.eps", "F.normalize(x * 1e-3, eps=0.01)", "normalize", {"p": 2.0, "dim": 1, "eps": 0.01},
      [s.randn(3, 5) * 1e-3], lambda a: F.normalize(a, eps=0.01), grad=(0,))
    c("normalize.int64", "F.normalize(int64 x)", "normalize", {"p": 2.0, "dim": 1}, [torch.tensor([[1, 2]])],
      lambda a: F.normalize(a))
    y = s.randn(3, 5)
    y[2] = x[2] * 2.0  # parallel: cos = 1
    for dim in [1, 0, -1]:
        c(f"cosine_similarity.d{dim}", f"F.cosine_similarity(x1, x2, dim={dim})", "cosine_similarity",
          {"dim": dim}, [x, y], lambda a, b, d=dim: F.cosine_similarity(a, b, dim=d), grad=(0, 1))
    c("cosine_similarity.broadcast", "F.cosine_similarity(x1 [3, 5], x2 [5])", "cosine_similarity", {"dim": 1},
      [s.randn(3, 5), s.randn(5)], lambda a, b: F.cosine_similarity(a, b), grad=(0, 1))
    c("cosine_similarity.eps", "F.cosine_similarity(x1 * 1e-3, x2, eps=0.01)", "cosine_similarity",
      {"dim": 1, "eps": 0.01}, [s.randn(3, 5) * 1e-3, s.randn(3, 5)],
      lambda a, b: F.cosine_similarity(a, b, eps=0.01), grad=(0, 1))
    c("cosine_similarity.int_float", "F.cosine_similarity(int64 x1, float x2)", "cosine_similarity", {"dim": 1},
      [torch.tensor([[1, 2, 0]]), s.randn(1, 3)], lambda a, b: F.cosine_similarity(a, b), grad=(1,))
    c("cosine_similarity.int64", "F.cosine_similarity(int64 x1, int64 x2)", "cosine_similarity", {"dim": 1},
      [torch.tensor([[1, 2]]), torch.tensor([[1, 3]])], lambda a, b: F.cosine_similarity(a, b))
    c("cosine_similarity.mismatch", "F.cosine_similarity(x1 [2, 3], x2 [2, 4])", "cosine_similarity", {"dim": 1},
      [torch.ones(2, 3), torch.ones(2, 4)], lambda a, b: F.cosine_similarity(a, b))
    a, b = s.randn(4, 6), s.randn(4, 6)
    b[0] = a[0]  # equal rows: the distance is eps's
    for p_, keep in [(2.0, False), (1.0, True), (3.0, False), (inf, False)]:
        c(f"pairwise_distance.p{p_}.k{int(keep)}", f"F.pairwise_distance(x1, x2, p={p_}, keepdim={keep})",
          "pairwise_distance", {"p": p_, "keepdim": keep}, [a, b],
          lambda u, v, p_=p_, k=keep: F.pairwise_distance(u, v, p=p_, keepdim=k), grad=(0, 1))
    c("pairwise_distance.eps", "F.pairwise_distance(x1, x2, eps=0.1)", "pairwise_distance",
      {"p": 2.0, "keepdim": False, "eps": 0.1}, [a, b], lambda u, v: F.pairwise_distance(u, v, eps=0.1), grad=(0, 1))
    c("pairwise_distance.1d", "F.pairwise_distance(x1 [6], x2 [6])", "pairwise_distance", {"p": 2.0, "keepdim": False},
      [s.randn(6), s.randn(6)], lambda u, v: F.pairwise_distance(u, v), grad=(0, 1))
    c("pairwise_distance.broadcast", "F.pairwise_distance(x1 [4, 6], x2 [6])", "pairwise_distance",
      {"p": 2.0, "keepdim": False}, [a, s.randn(6)], lambda u, v: F.pairwise_distance(u, v), grad=(0, 1))
    c("pairwise_distance.int64", "F.pairwise_distance(int64 x1, int64 x2)", "pairwise_distance",
      {"p": 2.0, "keepdim": False}, [torch.tensor([[1, 2]]), torch.tensor([[1, 3]])],
      lambda u, v: F.pairwise_distance(u, v))



# ---------------------------------------------------------------- quant
def quant(s):
    """Quantized tensors and observers (core/quant/): torch.quantize_per_tensor /
    quantize_per_channel (int_repr and dequantize), and the observers of
    torch.ao.quantization over several batches (the state and calculate_qparams after each)."""
    from torch.ao.quantization import observer as obs
    g = "quant"
    QD = {"quint8": torch.quint8, "qint8": torch.qint8}
    QS = {"per_tensor_affine": torch.per_tensor_affine, "per_tensor_symmetric": torch.per_tensor_symmetric,
          "per_channel_affine": torch.per_channel_affine, "per_channel_symmetric": torch.per_channel_symmetric}
    exact = {"rtol": 0.0, "atol": 0.0}

    # Quantize: ties at .5 (x / scale on a half integer: round half to even), values beyond
    # the range (clamped), zero points at and inside the range's ends.
    ties = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 126.5, 127.5, -127.5, -128.5, 0.0, -0.0])
    wide = torch.cat([s.randn(40) * 4, torch.tensor([1e6, -1e6, 300.0, -300.0, 1e-9])])
    for dt in ["quint8", "qint8"]:
        lo = 0 if dt == "quint8" else -128
        hi = 255 if dt == "quint8" else 127
        for name, x, scale, zps in [("ties", ties, 1.0, [0, 1, lo, hi]), ("ties_half_scale", ties * 0.5, 0.5, [0, 3]),
                                    ("wide", wide, 0.05, [0, lo, hi, (lo + hi) // 2]),
                                    ("wide_odd_scale", wide, 0.0371, [7 if dt == "quint8" else -7]),
                                    ("matrix", s.randn(3, 4, 5), 0.02, [10 if dt == "quint8" else -10])]:
            for zp in sorted(set(zps)):
                if zp < lo or zp > hi:
                    continue
                s.case(g, f"quantize_per_tensor.{dt}.{name}.zp{zp}",
                       f"torch.quantize_per_tensor(x, {scale}, {zp}, torch.{dt}) -> int_repr, dequantize", "quantize",
                       {"scheme": "per_tensor", "scale": scale, "zero_point": zp, "dtype": dt}, [x],
                       lambda a, scale=scale, zp=zp, dt=dt: (
                           lambda q: (q.int_repr(), q.dequantize()))(torch.quantize_per_tensor(a, scale, zp, QD[dt])),
                       **exact)
        for zp in [hi + 1, lo - 1]:
            s.case(g, f"quantize_per_tensor.{dt}.zp_out_of_range{zp}",
                   f"torch.quantize_per_tensor(x, 0.1, {zp}, torch.{dt})", "quantize",
                   {"scheme": "per_tensor", "scale": 0.1, "zero_point": zp, "dtype": dt}, [ties],
                   lambda a, zp=zp, dt=dt: (lambda q: (q.int_repr(), q.dequantize()))(
                       torch.quantize_per_tensor(a, 0.1, zp, QD[dt])), **exact)
        # Per channel, along each axis of a 3-D tensor; negative zero points for qint8.
        x3 = torch.cat([s.randn(4, 3, 6) * 3, torch.full((4, 3, 1), 0.5), torch.full((4, 3, 1), 1e5)], dim=2)
        for axis in [0, 1, 2]:
            c = x3.shape[axis]
            scales = (s.rand(c, dtype=F64) * 0.05 + 0.004)
            scales[0] = 0.5  # 0.5 / 0.5 = 1 exactly; 0.25 / 0.5 a tie
            zps = s.randint(lo, hi + 1, (c,))
            if dt == "qint8":
                zps[-1] = -100
            s.case(g, f"quantize_per_channel.{dt}.axis{axis}",
                   f"torch.quantize_per_channel(x [4, 3, 8], scales, zero_points, axis={axis}, torch.{dt})",
                   "quantize", {"scheme": "per_channel", "axis": axis, "dtype": dt}, [x3, scales, zps],
                   lambda a, sc, zp, axis=axis, dt=dt: (lambda q: (q.int_repr(), q.dequantize()))(
                       torch.quantize_per_channel(a, sc, zp, axis, QD[dt])), **exact)
        s.case(g, f"quantize_per_channel.{dt}.wrong_count",
               "torch.quantize_per_channel(x [4, 3, 8], 2 scales, 2 zero points, axis=1)", "quantize",
               {"scheme": "per_channel", "axis": 1, "dtype": dt},
               [x3, torch.tensor([0.1, 0.2], dtype=F64), torch.tensor([0, 0])],
               lambda a, sc, zp, dt=dt: torch.quantize_per_channel(a, sc, zp, 1, QD[dt]).int_repr(), **exact)
        s.case(g, f"quantize_per_channel.{dt}.axis_out_of_range",
               "torch.quantize_per_channel(x [4, 3, 8], scales, zero_points, axis=3)", "quantize",
               {"scheme": "per_channel", "axis": 3, "dtype": dt},
               [x3, torch.tensor([0.1] * 8, dtype=F64), torch.zeros(8, dtype=I64)],
               lambda a, sc, zp, dt=dt: torch.quantize_per_channel(a, sc, zp, 3, QD[dt]).int_repr(), **exact)

    # Observers: the state and calculate_qparams before any batch and after each one.
    def run_observer(make, kind):
        def run(*batches):
            o = make()
            outs = list(o.calculate_qparams())
            for b in batches:
                o(b)
                outs += [o.min_val.clone(), o.max_val.clone()]
                if kind == "hist":
                    outs.append(o.histogram.clone())
                outs += list(o.calculate_qparams())
            return outs
        return run

    normal = [s.randn(4, 8), s.randn(4, 8) * 2 + 1, s.randn(4, 8) * 0.5 - 3]
    positive = [s.rand(3, 5) + 0.5, s.rand(3, 5) * 4 + 1]
    batches = {
        "normal": normal,
        "positive": positive,
        "negative": [-p for p in positive],
        "constant": [torch.full((2, 5), 1.5), torch.full((2, 5), 1.5)],
        "constant_negative": [torch.full((6,), -0.25)],
        "zeros": [torch.zeros(3, 4), torch.zeros(3, 4)],
        "outlier": [torch.cat([s.randn(200), torch.tensor([1000.0])]), s.randn(200)],
        "tiny": [s.randn(10) * 1e-9],
        "empty_then": [torch.zeros(0), s.randn(5)],
    }
    configs = [("quint8", "per_tensor_affine", False, None), ("qint8", "per_tensor_affine", False, None),
               ("quint8", "per_tensor_symmetric", False, None), ("qint8", "per_tensor_symmetric", False, None),
               ("quint8", "per_tensor_affine", True, None), ("qint8", "per_tensor_symmetric", True, None),
               ("quint8", "per_tensor_affine", False, (0, 15)), ("qint8", "per_tensor_affine", False, (-8, 7)),
               ("quint8", "per_tensor_symmetric", False, (0, 100)), ("qint8", "per_tensor_affine", True, (-64, 63))]

    def options(dt, qs, rr, qr):
        kw = {"dtype": QD[dt], "qscheme": QS[qs], "reduce_range": rr}
        attrs = {"dtype": dt, "qscheme": qs, "reduce_range": rr}
        if qr is not None:
            kw.update(quant_min=qr[0], quant_max=qr[1])
            attrs.update(quant_min=qr[0], quant_max=qr[1])
        return kw, attrs

    def tag(dt, qs, rr, qr):
        return f"{dt}.{qs}" + (".reduce_range" if rr else "") + (f".q{qr[0]}_{qr[1]}" if qr else "")

    for type_name, cls, extra_kw, data_names in [
            ("MinMaxObserver", obs.MinMaxObserver, {}, list(batches)),
            ("MovingAverageMinMaxObserver", obs.MovingAverageMinMaxObserver, {"averaging_constant": 0.01},
             ["normal", "positive", "constant", "zeros", "outlier"]),
            ("MovingAverageMinMaxObserver", obs.MovingAverageMinMaxObserver, {"averaging_constant": 0.3},
             ["normal", "negative"]),
            ("HistogramObserver", obs.HistogramObserver, {},
             ["normal", "positive", "negative", "constant", "constant_negative", "zeros", "outlier", "tiny"])]:
        kind = "hist" if type_name == "HistogramObserver" else "minmax"
        for cfg in configs:
            kw, attrs = options(*cfg)
            kw.update(extra_kw)
            attrs.update(extra_kw, type=type_name)
            names = data_names if cfg[:3] in [("quint8", "per_tensor_affine", False), ("qint8", "per_tensor_symmetric",
                                                                                       False)] and cfg[3] is None \
                else data_names[:2]
            for dn in names:
                suffix = f".c{extra_kw['averaging_constant']}" if extra_kw else ""
                s.case(g, f"{type_name}{suffix}.{tag(*cfg)}.{dn}",
                       f"{type_name}({', '.join(f'{k}={v}' for k, v in attrs.items() if k != 'type')}) over "
                       f"{len(batches[dn])} batches ({dn})", "observer", attrs, batches[dn],
                       run_observer(lambda kw=kw, cls=cls: cls(**kw), kind), **exact)
    # Per channel, along dimension 0 and 1 (and -1), affine and symmetric.
    w = [s.randn(4, 6, 3), s.randn(4, 6, 3) * 3]
    w[1][2] = 0.0
    w[0][3] = 0.75
    for cfg in [("quint8", "per_channel_affine", False, None), ("qint8", "per_channel_affine", False, None),
                ("qint8", "per_channel_symmetric", False, None), ("quint8", "per_channel_symmetric", False, None),
                ("qint8", "per_channel_symmetric", True, None), ("quint8", "per_channel_affine", True, None),
                ("qint8", "per_channel_affine", False, (-8, 7))]:
        for axis in [0, 1, -1]:
            kw, attrs = options(*cfg)
            kw["ch_axis"] = axis
            attrs.update(ch_axis=axis, type="PerChannelMinMaxObserver")
            s.case(g, f"PerChannelMinMaxObserver.{tag(*cfg)}.axis{axis}",
                   f"PerChannelMinMaxObserver(ch_axis={axis}, {', '.join(f'{k}={v}' for k, v in attrs.items() if k not in ('type', 'ch_axis'))}) over 2 batches [4, 6, 3]",
                   "observer", attrs, w, run_observer(lambda kw=kw: obs.PerChannelMinMaxObserver(**kw), "minmax"),
                   **exact)
    # Options PyTorch refuses.
    for type_name, cls, kw, attrs in [
            ("MinMaxObserver", obs.MinMaxObserver, {"qscheme": torch.per_channel_affine},
             {"qscheme": "per_channel_affine"}),
            ("MinMaxObserver", obs.MinMaxObserver,
             {"qscheme": torch.per_tensor_symmetric, "reduce_range": True, "dtype": torch.quint8},
             {"qscheme": "per_tensor_symmetric", "reduce_range": True, "dtype": "quint8"}),
            ("MinMaxObserver", obs.MinMaxObserver, {"quant_min": 1, "quant_max": 10}, {"quant_min": 1, "quant_max": 10}),
            ("MinMaxObserver", obs.MinMaxObserver, {"quant_min": 0, "quant_max": 0}, {"quant_min": 0, "quant_max": 0}),
            ("MinMaxObserver", obs.MinMaxObserver, {"dtype": torch.qint8, "quant_min": -200, "quant_max": 100},
             {"dtype": "qint8", "quant_min": -200, "quant_max": 100}),
            ("PerChannelMinMaxObserver", obs.PerChannelMinMaxObserver, {"qscheme": torch.per_tensor_affine},
             {"qscheme": "per_tensor_affine"}),
            ("HistogramObserver", obs.HistogramObserver, {"qscheme": torch.per_channel_symmetric},
             {"qscheme": "per_channel_symmetric"})]:
        attrs = dict(attrs, type=type_name)
        s.case(g, f"{type_name}.refuses.{'.'.join(f'{k}{v}' for k, v in attrs.items() if k != 'type')}",
               f"{type_name}({', '.join(f'{k}={v}' for k, v in attrs.items() if k != 'type')})", "observer", attrs,
               [normal[0]], run_observer(lambda kw=kw, cls=cls: cls(**kw), "minmax"), **exact)
    # The dynamic path's activation parameters (ATen's ChooseQuantizationParams, in double).
    for name, x in [("normal", s.randn(50)), ("positive", s.rand(20) + 0.25), ("negative", -s.rand(20) - 3),
                    ("zeros", torch.zeros(4)), ("constant", torch.full((3,), 2.0)), ("tiny", torch.tensor([1e-7, 2e-7])),
                    ("tiny_both", torch.tensor([-1e-6, 3e-6])), ("tiny_negative", torch.tensor([-4e-6, -1e-6])),
                    ("skewed", torch.tensor([-0.001, 1000.0])), ("skewed_negative", torch.tensor([-1000.0, 0.003])),
                    ("outlier", torch.cat([s.randn(100), torch.tensor([500.0])])), ("mid_tie", torch.tensor([-1.0, 1.0])),
                    ("huge", torch.tensor([-3e38, 3e38]))]:
        for rr in [False, True]:
            s.case(g, f"choose_qparams_per_tensor.{name}" + (".reduce_range" if rr else ""),
                   f"torch._choose_qparams_per_tensor(x, reduce_range={rr})", "choose_qparams", {"reduce_range": rr},
                   [x], lambda a, rr=rr: (lambda p: (torch.tensor([p[0]], dtype=F64), torch.tensor([p[1]])))(
                       torch._choose_qparams_per_tensor(a, rr)), **exact)

def safetensors_edge(out_dir):
    """A file the reference writer made where every second tensor is empty: 0-byte entries
    share a start offset with their neighbours, and a reader must accept them."""
    tensors = {}
    for i in range(40):
        tensors[f"t{i:03d}"] = torch.zeros(0) if i % 2 else torch.full((i + 1,), float(i))
    tensors["scalar"] = torch.tensor(7.0)
    tensors["empty2d"] = torch.zeros(3, 0, dtype=I64)
    path = os.path.join(out_dir, "edge_empty_tensors.safetensors")
    save_file(tensors, path + ".tmp", metadata={"__torch__": torch.__version__.split("+")[0]})
    os.replace(path + ".tmp", path)


def qlayers(s):
    """Quantized layers against PyTorch's eager quantization on its fbgemm engine: dynamic
    Linear (quantize_dynamic), fusion (Conv2d-BatchNorm2d-ReLU folded), and whole static models
    (fuse, prepare, calibrate, convert) whose outputs must match bit for bit."""
    import torch.ao.quantization as tq
    from torch.ao.quantization import observer as obs
    torch.backends.quantized.engine = "fbgemm"
    # PyTorch's quantized tensors have no deterministic resize; the suite's deterministic mode
    # is off for this group (every quantized op here is deterministic on the CPU anyway).
    torch.use_deterministic_algorithms(False)
    g = "qlayers"
    exact = {"rtol": 0.0, "atol": 0.0}

    # Dynamic Linear: per-channel (per_channel_dynamic_qconfig) and per-tensor weights; rows of
    # several magnitudes, a constant batch, a batch of zeros, a batch of one.
    for per_channel in [True, False]:
        qconfig = tq.per_channel_dynamic_qconfig if per_channel else tq.default_dynamic_qconfig
        tag = "per_channel" if per_channel else "per_tensor"
        for (m, k, n, kind) in [(1, 64, 10, "randn"), (7, 33, 17, "randn"), (32, 128, 64, "wide"),
                                (4, 16, 8, "const"), (3, 16, 8, "zeros"), (5, 20, 3, "positive")]:
            x = {"randn": s.randn(m, k), "wide": s.randn(m, k) * 30, "const": torch.full((m, k), 0.75),
                 "zeros": torch.zeros(m, k), "positive": s.rand(m, k) * 6}[kind]
            w = s.randn(n, k) * 0.2
            b = s.randn(n)

            def run(x, w, b, qconfig=qconfig):
                lin = torch.nn.Sequential(torch.nn.Linear(w.shape[1], w.shape[0]))
                with torch.no_grad():
                    lin[0].weight.copy_(w)
                    lin[0].bias.copy_(b)
                q = tq.quantize_dynamic(lin, {torch.nn.Linear: qconfig}, dtype=torch.qint8)
                return q(x)
            s.case(g, f"linear_dynamic.{tag}.{m}x{k}x{n}.{kind}",
                   f"quantize_dynamic(Linear({k}, {n}), {tag} qint8)(x [{m}, {k}])", "linear_dynamic",
                   {"per_channel": per_channel}, [x, w, b], run, **exact)

    # Static models: fuse, prepare with an observer, calibrate on three batches, convert, run.
    def cnn_inputs():
        return [s.randn(4, 1, 3, 3) * 0.5, s.randn(4) * 0.1, s.rand(4) + 0.5, s.randn(4) * 0.1, s.randn(4) * 0.1,
                s.rand(4) + 0.5, s.randn(16, 64) * 0.2, s.randn(16) * 0.1, s.randn(10, 16) * 0.3, s.randn(10) * 0.1,
                s.randn(3, 8, 1, 8, 8), s.randn(5, 1, 8, 8)]

    def run_cnn(cw, cb, bw, bb, rm, rv, l1w, l1b, l2w, l2b, calib, x, observer="histogram", per_channel=True,
                reduce_range=True):
        model = torch.nn.Sequential(tq.QuantStub(), torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                    torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                    torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10),
                                    tq.DeQuantStub())
        with torch.no_grad():
            model[1].weight.copy_(cw); model[1].bias.copy_(cb)
            model[2].weight.copy_(bw); model[2].bias.copy_(bb)
            model[2].running_mean.copy_(rm); model[2].running_var.copy_(rv)
            model[6].weight.copy_(l1w); model[6].bias.copy_(l1b)
            model[8].weight.copy_(l2w); model[8].bias.copy_(l2b)
        model.eval()
        model = tq.fuse_modules(model, [["1", "2", "3"], ["6", "7"]])
        act = {"histogram": obs.HistogramObserver.with_args(reduce_range=reduce_range),
               "minmax": obs.MinMaxObserver.with_args(reduce_range=reduce_range),
               "moving_average_minmax": obs.MovingAverageMinMaxObserver.with_args(reduce_range=reduce_range)}[observer]
        model.qconfig = tq.QConfig(activation=act, weight=obs.default_per_channel_weight_observer if per_channel
                                   else obs.default_weight_observer)
        tq.prepare(model, inplace=True)
        with torch.no_grad():
            for batch in calib:
                model(batch)
        tq.convert(model, inplace=True)
        return model(x)

    # (The moving-average observer is left out here: PyTorch's eager prepare feeds a fused
    # module's observer each batch twice, which only that observer's average notices. Its own
    # cases are in the quant group.)
    for observer in ["histogram", "minmax"]:
        for per_channel in [True, False]:
            for reduce_range in [True, False]:
                if observer != "histogram" and not per_channel:
                    continue
                tag = f"{observer}.{'per_channel' if per_channel else 'per_tensor'}.rr{int(reduce_range)}"
                s.case(g, f"static_cnn.{tag}",
                       f"fuse/prepare/convert of Conv2d-BN-ReLU-MaxPool-Flatten-Linear-ReLU-Linear ({tag})",
                       "static_cnn", {"observer": observer, "per_channel": per_channel,
                                      "reduce_range": reduce_range}, cnn_inputs(),
                       lambda *a, o=observer, p=per_channel, r=reduce_range: run_cnn(*a, observer=o, per_channel=p,
                                                                                    reduce_range=r),
                       rtol=1e-5, atol=1e-6)

    # The int8 layers alone, with given parameters: quantized input, weights and output
    # parameters fixed, so the integers must match exactly (the kernel and the requantization).
    import torch.ao.nn.quantized as nnq
    import torch.ao.nn.intrinsic.quantized as nniq
    for per_channel in [True, False]:
        for relu in [False, True]:
            for (m, k, n) in [(1, 64, 10), (9, 33, 17), (16, 100, 40)]:
                tag = f"{'per_channel' if per_channel else 'per_tensor'}{'.relu' if relu else ''}.{m}x{k}x{n}"
                w = s.randn(n, k) * 0.2
                if per_channel:
                    wscale = (w.abs().amax(dim=1) / 127.5).double()
                else:
                    wscale = torch.tensor([float(w.abs().max()) / 127.5], dtype=F64)

                def run_linear(x, w, b, wscale, per_channel=per_channel, relu=relu):
                    qw = (torch.quantize_per_channel(w, wscale, torch.zeros(w.shape[0], dtype=I64), 0, torch.qint8)
                          if per_channel else torch.quantize_per_tensor(w, float(wscale[0]), 0, torch.qint8))
                    layer = (nniq.LinearReLU if relu else nnq.Linear)(w.shape[1], w.shape[0])
                    layer.set_weight_bias(qw, b)
                    layer.scale, layer.zero_point = 0.07, 17
                    y = layer(torch.quantize_per_tensor(x, 0.05, 131, torch.quint8))
                    return y.int_repr(), y.dequantize()
                s.case(g, f"linear_static.{tag}", f"quantized Linear{'ReLU' if relu else ''} ({tag}), input (0.05, 131),"
                       " output (0.07, 17)", "linear_static", {"per_channel": per_channel, "relu": relu,
                                                               "in_scale": 0.05, "in_zp": 131, "out_scale": 0.07,
                                                               "out_zp": 17},
                       [s.randn(m, k) * 3, w, s.randn(n), wscale], run_linear, **exact)
            for (cin, cout, kk, stride, pad, dil, hw) in [(1, 4, 3, 1, 1, 1, 8), (3, 8, 3, 2, 0, 1, 9),
                                                         (5, 6, 1, 1, 0, 1, 5), (2, 3, 3, 1, 2, 2, 7)]:
                tag = f"{'per_channel' if per_channel else 'per_tensor'}{'.relu' if relu else ''}.c{cin}o{cout}k{kk}s{stride}p{pad}d{dil}"
                w = s.randn(cout, cin, kk, kk) * 0.3
                if per_channel:
                    wscale = (w.abs().flatten(1).amax(dim=1) / 127.5).double()
                else:
                    wscale = torch.tensor([float(w.abs().max()) / 127.5], dtype=F64)

                def run_conv(x, w, b, wscale, per_channel=per_channel, relu=relu, stride=stride, pad=pad, dil=dil):
                    qw = (torch.quantize_per_channel(w, wscale, torch.zeros(w.shape[0], dtype=I64), 0, torch.qint8)
                          if per_channel else torch.quantize_per_tensor(w, float(wscale[0]), 0, torch.qint8))
                    layer = (nniq.ConvReLU2d if relu else nnq.Conv2d)(w.shape[1], w.shape[0], w.shape[2],
                                                                     stride=stride, padding=pad, dilation=dil)
                    layer.set_weight_bias(qw, b)
                    layer.scale, layer.zero_point = 0.09, 100
                    y = layer(torch.quantize_per_tensor(x, 0.04, 120, torch.quint8))
                    return y.int_repr(), y.dequantize()
                s.case(g, f"conv2d_static.{tag}", f"quantized Conv2d{'ReLU' if relu else ''} ({tag}), input (0.04, 120),"
                       " output (0.09, 100)", "conv2d_static",
                       {"per_channel": per_channel, "relu": relu, "stride": stride, "padding": pad, "dilation": dil,
                        "in_scale": 0.04, "in_zp": 120, "out_scale": 0.09, "out_zp": 100},
                       [s.randn(2, cin, hw, hw) * 2, w, s.randn(cout) * 0.5, wscale], run_conv, **exact)

    # Dynamic LSTM and GRU (quantize_dynamic with {nn.LSTM, nn.GRU}): the input projection of
    # the whole sequence and each step's hidden projection through int8, biases packed with
    # their weights; one and two layers, bidirectional, batch_first.
    for kind in ["LSTM", "GRU"]:
        for per_channel in [True, False]:
            qconfig = tq.per_channel_dynamic_qconfig if per_channel else tq.default_dynamic_qconfig
            for layers, bidir, bf in [(1, False, False), (2, True, True)]:
                torch.manual_seed(23)
                module = getattr(torch.nn, kind)(6, 5, num_layers=layers, bidirectional=bidir, batch_first=bf).eval()
                st = state(module)
                names = [k for k, _ in module.named_parameters()]
                x = s.randn(4, 3, 6) * 2

                def run_rnn(x, module=module, st=st, kind=kind, qconfig=qconfig):
                    module.load_state_dict(st)
                    q = tq.quantize_dynamic(torch.nn.Sequential(module), {getattr(torch.nn, kind): qconfig},
                                            dtype=torch.qint8)
                    out, h = q(x)
                    return (out, *h) if kind == "LSTM" else (out, h)
                tag = f"{kind}.l{layers}.bi{int(bidir)}.bf{int(bf)}.{'per_channel' if per_channel else 'per_tensor'}"
                attrs = {"type": kind, "in": 6, "hidden": 5, "layers": layers, "batch_first": bf,
                         "bidirectional": bidir, "bias": True, "dropout": 0.0, "nonlinearity": "tanh", "train": False,
                         "params": names, "proj_size": 0, "quantize_dynamic": True, "per_channel": per_channel}
                s.case(g, f"rnn_dynamic.{tag}", f"quantize_dynamic(nn.{kind}(6, 5, num_layers={layers}, "
                       f"bidirectional={bidir}, batch_first={bf}))(x [4, 3, 6])", "rnn", attrs, [x], run_rnn,
                       rtol=1e-5, atol=1e-5, extra=st)

    # Conv-BN folding alone (float32): torch.ao.quantization.fuse_modules in eval mode. The fused
    # convolution sums 27 unit-scale products per output, so its float32 rounding differs from
    # PyTorch's summation order by about 1e-6 absolute: atol 1e-5.
    def run_fold(cw, cb, bw, bb, rm, rv, x):
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.BatchNorm2d(5))
        with torch.no_grad():
            model[0].weight.copy_(cw); model[0].bias.copy_(cb)
            model[1].weight.copy_(bw); model[1].bias.copy_(bb)
            model[1].running_mean.copy_(rm); model[1].running_var.copy_(rv)
        model.eval()
        fused = tq.fuse_modules(model, [["0", "1"]])
        return fused[0].weight, fused[0].bias, fused(x)
    s.case(g, "fuse_conv_bn_eval", "fuse_modules(Conv2d(3, 5, 3, padding=1), BatchNorm2d(5)) in eval mode",
           "fuse_conv_bn", {}, [s.randn(5, 3, 3, 3), s.randn(5), s.rand(5) + 0.5, s.randn(5), s.randn(5),
                                s.rand(5) + 0.1, s.randn(2, 3, 6, 6)], run_fold, rtol=1e-5, atol=1e-5)
    torch.use_deterministic_algorithms(True)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
    only = set(sys.argv[2:])  # group functions to run (all when none is named)
    s = Suite()
    for group in (promotion, elementwise, reductions, losses, nn_layers, optimizers, schedules, indexing, views,
                  factories, float_classes, corners, additions, selection, dtypes, rnn2, layers2, ops3, quant,
                  qlayers):
        if only and group.__name__ not in only:
            continue
        # Each group draws from its own seed: a case added to one group changes that group's
        # file alone, and a group run by name writes what the full run writes.
        s.gen.manual_seed(zlib.crc32(group.__name__.encode()))
        group(s)
    s.write(out_dir)
    safetensors_edge(out_dir)


if __name__ == "__main__":
    main()
