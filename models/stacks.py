"""Models built on the fly for tests and benchmarks of scale and deployment (not written to models/).

``layer_norm_stack``: decomposed LayerNorms in a row, as TorchScript exports LayerNorm below opset
17 (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), the first fed by the FP32 graph
input, each block's weights given by ``weights``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh


def layer_norm_stack(blocks: int, hidden: int = 64, rows: int = 2, opset: int = 17, ramp: bool = False,
                     tail: str = "Relu") -> onnx.ModelProto:
    """``blocks`` LayerNorms named ``b<k>_mean`` ... ``b<k>_shift``; weights 1 and bias 0 (as torch
    initialises them: each block renormalises, errors do not add up), or ``ramp``: weights from 0.5
    to 1.5 and biases from -0.1 to 0.1; then a ``tail`` node (or none)."""
    nodes, inits, x = [], [nh.from_array(np.array(2, np.float32), "two"),
                           nh.from_array(np.array(1e-5, np.float32), "eps")], "x"
    for k in range(blocks):
        p = f"b{k}_"
        nodes += [h.make_node("ReduceMean", [x], [p + "m"], name=p + "mean", axes=[-1]),
                  h.make_node("Sub", [x, p + "m"], [p + "d"], name=p + "sub"),
                  h.make_node("Pow", [p + "d", "two"], [p + "sq"], name=p + "pow"),
                  h.make_node("ReduceMean", [p + "sq"], [p + "v"], name=p + "var", axes=[-1]),
                  h.make_node("Add", [p + "v", "eps"], [p + "ve"], name=p + "add_eps"),
                  h.make_node("Sqrt", [p + "ve"], [p + "s"], name=p + "sqrt"),
                  h.make_node("Div", [p + "d", p + "s"], [p + "n"], name=p + "div"),
                  h.make_node("Mul", [p + "n", p + "g"], [p + "sc"], name=p + "scale"),
                  h.make_node("Add", [p + "sc", p + "b"], [p + "y"], name=p + "shift")]
        weight = np.linspace(0.5, 1.5, hidden) if ramp else np.ones(hidden)
        bias = np.linspace(-0.1, 0.1, hidden) if ramp else np.zeros(hidden)
        inits += [nh.from_array(weight.astype(np.float32), p + "g"),
                  nh.from_array(bias.astype(np.float32), p + "b")]
        x = p + "y"
    if tail:
        nodes.append(h.make_node(tail, [x], ["y"], name="out"))
        x = "y"
    graph = h.make_graph(nodes, "layer_norm_stack",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, [rows, hidden])],
                         [h.make_tensor_value_info(x, TensorProto.FLOAT, [rows, hidden])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    return model
