"""The written plan states the precision the written model computes each node in (issue 23's
leftover): a 16-bit node with no 16-bit output (ArgMax, Shape, IsNaN, a Cast to an integer) reads its
float input as it is written, so one reading an FP32 tensor computes in FP32, and the plan said FP16."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.rewriter import rewrite

_FLOATS = {TensorProto.FLOAT: "fp32", TensorProto.DOUBLE: "fp32", TensorProto.FLOAT16: "fp16",
           TensorProto.BFLOAT16: "bf16"}


def _readers() -> onnx.ModelProto:
    """Readers of the graph input x, of exp's output (kept FP32: it overflows FP16) and of relu's."""
    node = helper.make_node
    nodes = [node("ArgMax", ["x"], ["am"], "argmax_in", axis=1), node("Exp", ["x"], ["e"], "exp"),
             node("ArgMax", ["e"], ["ae"], "argmax_exp", axis=1), node("IsNaN", ["x"], ["nan"], "isnan_in"),
             node("Shape", ["e"], ["s"], "shape_exp"),
             node("Cast", ["e"], ["ei"], "cast_int", to=TensorProto.INT32),
             node("Relu", ["x"], ["r"], "relu"), node("ArgMax", ["r"], ["ar"], "argmax_relu", axis=1),
             node("Mul", ["r", "two"], ["y"], "mul")]
    outputs = [("y", TensorProto.FLOAT, [4, 16]), ("am", TensorProto.INT64, [4, 1]),
               ("ae", TensorProto.INT64, [4, 1]), ("nan", TensorProto.BOOL, [4, 16]),
               ("s", TensorProto.INT64, [2]),
               ("ei", TensorProto.INT32, [4, 16]), ("ar", TensorProto.INT64, [4, 1])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])
    graph = helper.make_graph(nodes, "readers", [x], [helper.make_tensor_value_info(*o) for o in outputs],
                              [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _computes_in(model: onnx.ModelProto) -> dict[str, str]:
    """Each node's precision as the file states it: the type of its float inputs and outputs."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.input, *inferred.graph.output,
                                                              *inferred.graph.value_info)}
    types.update({i.name: i.data_type for i in model.graph.initializer})
    found = {}
    for n in model.graph.node:
        floats = {_FLOATS[types[v]] for v in (*n.input, *n.output) if types.get(v) in _FLOATS}
        if floats:
            found[n.name] = max(floats, key=lambda p: p != "fp32")  # a Cast between types: its 16-bit side
    return found


def _exp_fp32_plan(ctx: ModelContext):
    return ctx.all_low_plan().with_fp32(["exp"])


def test_a_node_that_writes_no_float_is_planned_in_the_precision_it_reads():
    ctx = ModelContext.of(_readers())
    result = rewrite(ctx, _exp_fp32_plan(ctx))
    written = _computes_in(result.model)
    planned = {n: result.plan.precision(n).value for n in written if n in result.plan.decisions}
    assert planned == {n: written[n] for n in planned}
    fp32 = ("argmax_in", "argmax_exp", "isnan_in", "shape_exp", "cast_int")
    assert [n for n in result.plan.fp32_nodes if n != "exp"] == list(fp32)
    assert result.plan.precision("argmax_relu").value == "fp16"  # reads relu's FP16 output
    [why] = result.plan.decisions["argmax_exp"].reasons
    assert (why.source, why.detail) == ("type", "reads 'e' as it is written, FP32: ArgMax has no fp16 "
                                                "output, so no Cast puts its input in fp16 (planned fp16: "
                                                "default)")
    cast_why = result.plan.decisions["cast_int"].reasons[0].detail
    assert cast_why.startswith("reads 'e' as it is written, FP32: Cast has no fp16 output")


def test_with_fp16_io_a_reader_of_the_graph_input_reads_it_in_fp16():
    ctx = ModelContext.of(_readers())
    plan = _exp_fp32_plan(ctx)
    result = rewrite(ctx, type(plan)(plan.decisions, fp16_io=True))
    assert result.plan.precision("argmax_in").value == _computes_in(result.model)["argmax_in"] == "fp16"
    assert result.plan.precision("argmax_exp").value == "fp32"


def test_the_saved_plan_says_it_the_stamp_hashes_it_and_fed_back_it_writes_the_same_model(tmp_path):
    src, out, again = (str(tmp_path / n) for n in ("m.onnx", "o.onnx", "again.onnx"))
    onnx.save(_readers(), src)
    plan = str(tmp_path / "plan.json")
    assert main(["convert", src, "-o", out, "--mode", "all-fp16", "-q", "--keep-fp32", "^exp$",
                 "--save-plan", plan]) == 0
    nodes = json.load(open(plan))["nodes"]
    assert {n: nodes[n]["precision"] for n in ("argmax_in", "isnan_in", "argmax_relu")} == {
        "argmax_in": "fp32", "isnan_in": "fp32", "argmax_relu": "fp16"}
    assert nodes["argmax_in"]["reasons"] == [{"source": "type", "detail": (
        "reads 'x' as it is written, FP32: ArgMax has no fp16 output, so no Cast puts its input in fp16 "
        "(planned fp16: default)")}]
    props = {p.key: p.value for p in onnx.load(out).metadata_props}
    assert props["onnx_precision.plan_sha256"] == hashlib.sha256(open(plan, "rb").read()).hexdigest()
    assert main(["convert", src, "-o", again, "--mode", "all-fp16", "-q", "--plan", plan]) == 0
    assert open(again, "rb").read() == open(out, "rb").read()


def test_under_keep_float64_a_cast_to_float64_is_planned_fp32():
    """Its float64 output stays float64 and its input is read as written: it has no 16-bit side."""
    from dataclasses import replace

    from conftest import parse

    model = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x) => (float[4] y) {
            w = Cast <to = 11> (x)
            e = Exp (w)
            y = Cast <to = 1> (e)
        }""")
    ctx = replace(ModelContext.of(model), keep_float64=True)
    result = rewrite(ctx, ctx.all_low_plan())
    assert [(n, d.precision.value, [r.detail for r in d.reasons]) for n, d in result.plan.decisions.items()
            if n == "node_of_w"] == [("node_of_w", "fp32", [
                "reads 'x' as it is written, FP32: Cast has no fp16 output, so no Cast puts its input in "
                "fp16 (planned fp16: default)"])]
    assert _computes_in(result.model)["node_of_w"] == "fp32"
