"""TensorRT flags: exact layer names, only float layers, both TensorRT generations."""

from __future__ import annotations

import shlex

import pytest
from conftest import parse

from onnx_precision.errors import PlanError
from onnx_precision.graph import name_nodes
from onnx_precision.plan import Precision, Reason, uniform_plan
from onnx_precision.trt import trt_flags, trt_flags_text

TEXT = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x) => (float[N, 4] y, int64[2] shape) {
    shape = Shape(x)
    k = Constant<value = float {2.0}>()
    sq = Mul(x, x)
    ss = ReduceSum<keepdims = 1>(sq, axes)
    norm = Sqrt(ss)
    scaled = Mul(x, k)
    y = Div(scaled, norm)
}
"""


def model_and_plan(fp32_nodes):
    model = parse(TEXT.replace("(sq, axes)", "(sq)"))
    name_nodes(model)
    ops = [n.name for n in model.graph.node]
    plan = uniform_plan(ops, Precision.FP16, Reason("default", "all-fp16")).with_fp32(fp32_nodes)
    return model, plan


def test_flags_name_only_fp32_float_layers_exactly():
    model, plan = model_and_plan(["node_of_ss", "node_of_norm", "node_of_shape", "node_of_k"])
    flags = trt_flags(model, plan)
    # Shape (integer output) and Constant (weights, not a layer) are not float layers.
    assert flags.layer_precisions == (("node_of_ss", "fp32"), ("node_of_norm", "fp32"))
    assert flags.layer_output_types == (("node_of_ss", ("fp32",)), ("node_of_norm", ("fp32",)))
    assert flags.weakly_typed_args() == [
        "--fp16", "--precisionConstraints=obey",
        "--layerPrecisions=node_of_ss:fp32,node_of_norm:fp32",
        "--layerOutputTypes=node_of_ss:fp32,node_of_norm:fp32",
    ]


def test_all_fp16_plan_gives_plain_fp16_flag():
    model, plan = model_and_plan([])
    assert trt_flags(model, plan).weakly_typed_args() == ["--fp16"]


def test_multi_output_layer_lists_each_output_type():
    model = parse("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x, int64[1] k) => (float[2] v, int64[2] i) {
        v, i = TopK(x, k)
    }
    """)
    name_nodes(model)
    plan = uniform_plan(["node_of_v"], Precision.FP32, Reason("user", "test"))
    assert trt_flags(model, plan).layer_output_types == (("node_of_v", ("fp32", "int64")),)


def test_names_trtexec_cannot_parse_are_an_error():
    model, plan = model_and_plan([])
    model.graph.node[4].name = "norm:0"
    plan = uniform_plan([n.name for n in model.graph.node], Precision.FP16, Reason("d", "")).with_fp32(["norm:0"])
    with pytest.raises(PlanError, match=r"node 'norm:0' is pinned to FP32 but its name contains ':'"):
        trt_flags(model, plan)


def test_text_has_both_generations_with_comments():
    model, plan = model_and_plan(["node_of_norm"])
    text = trt_flags_text(model, plan, "in dir/model.onnx", "out.onnx")
    lines = text.splitlines()
    assert lines[1].startswith("# TensorRT 8.6 to 10.11")
    assert shlex.split(lines[3]) == [
        "trtexec", "--onnx=in dir/model.onnx", "--fp16", "--precisionConstraints=obey",
        "--layerPrecisions=node_of_norm:fp32", "--layerOutputTypes=node_of_norm:fp32"]
    assert lines[4].startswith("# TensorRT 10.12 and later")
    assert lines[5] == "trtexec --onnx=out.onnx --stronglyTyped"
