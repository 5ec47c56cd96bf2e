"""Facts live in one table: each module reads the row, none keeps its own list (issue 31, item 4)."""

from __future__ import annotations

import ast
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from onnx_precision import flops, quantized
from onnx_precision.search import driver

PACKAGE = Path(quantized.__file__).parent


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of ``path``'s code, its docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_integer_ops_are_named_only_in_their_table():
    # the list was kept three times (quantized, flops' twins, the search's contractions)
    named = [f"{path.relative_to(PACKAGE)}:{line}: {text}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.name != "quantized.py"
             for line, text in _code_strings(path) if text in quantized.INTEGER_OPS]
    assert named == []


def _integer_model(op: str, weight_at: int) -> onnx.ModelProto:
    """``op`` reading x [2, 8] and its weight w [8, 4] (input ``weight_at``), uint8 throughout."""
    u8, f32 = TensorProto.UINT8, TensorProto.FLOAT
    inits = [helper.make_tensor("w", u8, [8, 4], [1] * 32), helper.make_tensor("s", f32, [], [0.1]),
             helper.make_tensor("z", u8, [], [0])]
    inputs = ["x", "s", "z", "w", "s", "z", "s", "z"] if weight_at == 3 else ["x", "w"]
    out_type = u8 if weight_at == 3 else TensorProto.INT32
    node = helper.make_node(op, inputs, ["y"], name="k")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", u8, [2, 8])],
                              [helper.make_tensor_value_info("y", out_type, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_an_integer_kernel_counts_as_its_float_twin():
    for op, weight_at in (("QLinearMatMul", 3), ("MatMulInteger", 1)):
        assert quantized.INTEGER_OPS[op].weight_input == weight_at
        # 2*M*N*K of the MatMul it computes as: 2 * (2*4) * 8
        assert flops.integer_kernel_flops(_integer_model(op, weight_at), {}, {"k"}) == {"k": 128.0}


def test_the_search_orders_an_integer_contraction_as_its_twin():
    ops = {"relu": "Relu", "qconv": "QLinearConv", "quant": "DynamicQuantizeLinear", "mm": "MatMul"}
    assert driver.widen_order(["qconv", "mm", "relu", "quant"], ops) == ["relu", "quant", "qconv", "mm"]
    assert {op for op, row in quantized.INTEGER_OPS.items() if row.twin} <= driver.CONTRACTIONS
