"""Facts live in one table: each module reads the row, none keeps its own list (issue 31, item 4)."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from onnx_precision import flops, opset_upgrade, quantized
from onnx_precision.float_types import BF16, FP16, LOW_PRECISIONS
from onnx_precision.search import driver
from onnx_precision.target import GENERIC, GenericTarget

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


@pytest.mark.slow  # 1.1 s in a full run on 2 busy cores
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


def _rows_named(path: Path) -> list[str]:
    """Where ``path``'s code names a 16-bit type's row (``BF16``, ``Precision.FP16``) rather than
    reading the row it is given."""
    rows = {low.name for low in LOW_PRECISIONS.values()}
    return [f"{path.name}:{node.lineno}: {ast.unparse(node)}"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if (isinstance(node, ast.Name) and node.id in rows)
            or (isinstance(node, ast.Attribute) and node.attr in rows)
            or (isinstance(node, ast.alias) and node.name in rows)]


def test_the_opset_upgrade_and_the_fallback_read_their_types_rows():
    # opset_upgrade asked `low is BF16` (and wrote BF16's name, Cast opset, typing and kernels); the
    # fallback moved nodes back to Precision.FP16 and said BF16's "FP32's range" of any type
    named = [*_rows_named(PACKAGE / "opset_upgrade.py"), *_rows_named(PACKAGE / "search" / "fallback.py")]
    assert named == []


def test_a_type_with_bf16s_facts_gets_bf16s_opset_upgrade():
    # a new row is a value: a copy of BF16's was taken for FP16 (only its Q/DQ nodes counted)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    other = replace(BF16, name="BF16b")
    needed = opset_upgrade.needed_opset(model, GENERIC, other)
    assert (needed.current, needed.opset, needed.ops) == (11, 13, ("Cast", "Relu"))
    assert needed == opset_upgrade.needed_opset(model, GENERIC, BF16)
    assert opset_upgrade.needed_opset(model, GENERIC, FP16).opset == 11  # FP16: no Q/DQ, not raised
    assert opset_upgrade.upgrade_type(GenericTarget(FP16, other)) is other
    assert opset_upgrade.upgrade_type(GENERIC) is FP16


def test_a_types_range_as_reasons_say_it():
    assert (BF16.range_text, FP16.range_text) == ("FP32's range", "range up to 65504")
