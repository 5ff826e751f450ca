"""Quantizes a float ONNX file with onnxruntime's own dynamic quantizer, as a user who quantized a
model elsewhere would, for Anvil's importer to run.

  ort_quantize_dynamic.py FLOAT.onnx OUT.onnx per_channel|per_tensor

onnxruntime's dynamic quantizer rewrites MatMul (not Gemm), so each Gemm of the float file is
first written as MatMul + Add, the form other exporters give a Linear layer; the result holds
DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul groups. Prints the op types of OUT.onnx
on one line.
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

src, dst, mode = sys.argv[1], sys.argv[2], sys.argv[3]
model = onnx.load(src)
graph = model.graph
inits = {t.name: t for t in graph.initializer}
nodes = []
for n in graph.node:
    if n.op_type != "Gemm":
        nodes.append(n)
        continue
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    assert attrs.get("transA", 0) == 0 and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0, attrs
    w = numpy_helper.to_array(inits[n.input[1]])
    if attrs.get("transB", 0):
        w = np.ascontiguousarray(w.T)
    w_name = n.input[1] + "_in_out"
    graph.initializer.append(numpy_helper.from_array(w, w_name))
    product = n.output[0] + "_matmul"
    nodes.append(helper.make_node("MatMul", [n.input[0], w_name], [product], name=n.name + "_matmul"))
    if len(n.input) > 2 and n.input[2]:
        nodes.append(helper.make_node("Add", [product, n.input[2]], [n.output[0]], name=n.name + "_bias"))
    else:
        nodes.append(helper.make_node("Identity", [product], [n.output[0]], name=n.name + "_identity"))
del graph.node[:]
graph.node.extend(nodes)
rewritten = dst + ".matmul.onnx"
onnx.save(model, rewritten)
quantize_dynamic(rewritten, dst, weight_type=QuantType.QInt8, per_channel=(mode == "per_channel"))
print(" ".join(n.op_type for n in onnx.load(dst).graph.node))
