"""Issue 25's done-when, case by case: each quantized block converts (exit 0), its 16-bit remainder
passes the relative gate against an unquantized original, no Cast sits between a DequantizeLinear and
its Conv/MatMul/Gemm, and the scales FP16 cannot hold are named and written FP32.

The original of a block quantized by hand is the block its quantization could have come from: each
constant weight dequantized, then moved by less than half a quantum (INT8: 0.45 x scale; FP8: 1%,
below half the spacing of E5M2's 2 mantissa bits), and each activation quantizer bypassed."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from test_quantized import (
    _written_types,
    dq_cast_kernels,
    fp8_block,
    nbits_block,
    qdq_conv,
    qdq_mlp,
    torchao_block,
)

from onnx_precision.cli import main
from onnx_precision.quant_reference import bypassed

REMAINDER = re.compile(r"^note: y: quantization error ([0-9.e+-]+), 16-bit remainder ([0-9.e+-]+) .*"
                       r"bound ([0-9.e+-]+)$")


def _dequantized(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto]) -> np.ndarray:
    """The value of a DequantizeLinear that reads constants only, by onnx's reference evaluator."""
    graph = helper.make_graph([node], "dq", [], [helper.make_tensor_value_info(node.output[0], 0, None)],
                              [constants[name] for name in node.input if name])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    (value,) = ReferenceEvaluator(model).run(None, {})
    return np.asarray(value, np.float32)


def original_of(model: onnx.ModelProto, rng: np.random.Generator) -> onnx.ModelProto:
    """``model`` as the FP32 model it could be quantized from (see the module's docstring)."""
    out = bypassed(model) or model
    constants = {init.name: init for init in out.graph.initializer}
    nodes: list[onnx.NodeProto] = []
    for node in out.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in constants:
            w = _dequantized(node, constants)
            fp8 = constants[node.input[0]].data_type in (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2)
            scale = numpy_helper.to_array(constants[node.input[1]])
            if fp8:
                w = w * (1 + rng.uniform(-0.01, 0.01, w.shape)).astype(np.float32)
            else:
                shape = [1] * w.ndim
                if scale.ndim:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
                    shape[axis] = -1
                w = w + (rng.uniform(-0.45, 0.45, w.shape) * scale.reshape(shape)).astype(np.float32)
            out.graph.initializer.append(numpy_helper.from_array(w.astype(np.float32), node.output[0]))
        elif node.op_type == "MatMulNBits":
            nodes.append(helper.make_node("MatMul", [node.input[0], f"{node.name}__w"], list(node.output),
                                          name=node.name))
            out.graph.initializer.append(numpy_helper.from_array(_nbits_weight(node, constants, rng),
                                                                 f"{node.name}__w"))
        else:
            nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    del out.opset_import[:]
    out.opset_import.append(helper.make_opsetid("", 19))
    out.ir_version = 9
    onnx.checker.check_model(out, full_check=True)
    return out


def _nbits_weight(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto],
                  rng: np.random.Generator) -> np.ndarray:
    """MatMulNBits' [K, N] float weight: 4-bit values, low nibble first, less their zero point (8 by
    default) times their block's scale, moved by less than half a quantum."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    k, n, block = attrs["K"], attrs["N"], attrs["block_size"]
    packed = numpy_helper.to_array(constants[node.input[1]])
    q = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, k // block, block).astype(np.float32)
    scale = numpy_helper.to_array(constants[node.input[2]]).reshape(n, k // block, 1)
    zero = (numpy_helper.to_array(constants[node.input[3]]).reshape(n, k // block, 1)
            if len(node.input) > 3 and node.input[3] else 8.0)
    w = (q - zero + rng.uniform(-0.45, 0.45, q.shape)) * scale
    return w.reshape(n, k).T.astype(np.float32)


def _zeros_in_range(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    x = rng.uniform(0, 0.1, shape).astype(np.float32)
    x[..., ::3] = 0
    return x


# (case, the quantized model (its Relu, "relu" or "relu0", is in the 16-bit remainder), its sample,
#  the scales that must stay FP32)
CASES = [
    ("qdq-mlp", lambda: qdq_mlp(17, layers=1), lambda r: r.uniform(0, 1, (4, 32)), ()),
    ("qdq-conv", lambda: qdq_conv(13), lambda r: r.uniform(0, 1, (1, 8, 16, 16)), ()),
    ("fp8", lambda: fp8_block(64), lambda r: r.standard_normal((4, 64)), ()),
    ("torchao", lambda: torchao_block(0.1 / 57344), lambda r: _zeros_in_range((4, 16), r), ("x_s",)),
    ("flushes", lambda: torchao_block(2e-8), lambda r: _zeros_in_range((4, 16), r), ("x_s",)),
    ("matmulnbits", nbits_block, lambda r: r.standard_normal((4, 64)), ()),
]


@pytest.mark.parametrize("case,build,sample,fp32_scales", CASES, ids=[c[0] for c in CASES])
def test_a_quantized_block_passes_the_relative_gate_against_its_original(tmp_path, capsys, case, build,
                                                                         sample, fp32_scales):
    rng = np.random.default_rng(0)
    model = build()
    path, original, out = (str(tmp_path / f) for f in ("q.onnx", "original.onnx", "o.onnx"))
    onnx.save(model, path)
    onnx.save(original_of(model, rng), original)
    np.savez(tmp_path / "x.npz", x=sample(rng).astype(np.float32))
    assert main(["convert", path, "-o", out, "--inputs", str(tmp_path / "x.npz"),
                 "--reference-model", original]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert f"{path} -> {out}: passed" in printed
    found = [REMAINDER.match(line) for line in printed]
    quantization, remainder, bound = next(tuple(map(float, m.groups())) for m in found if m)
    assert quantization > 0 and remainder <= bound == pytest.approx(1.3 * quantization, rel=1e-3)
    written = onnx.load(out)
    assert dq_cast_kernels(written) == []
    types = {init.name: init.data_type for init in written.graph.initializer}
    assert {name: types[name] for name in fp32_scales} == {name: TensorProto.FLOAT for name in fp32_scales}
    assert _written_types(written)["relu0" if case == "qdq-mlp" else "relu"] == TensorProto.FLOAT16
