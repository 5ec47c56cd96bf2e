"""onnx-tensorrt's layer names (shared counter, duplicates, unnamed nodes, split ops) and the flags built on
them."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnx_precision.graph import name_nodes
from onnx_precision.plan import Precision, Reason, uniform_plan
from onnx_precision.trt import trt_flags
from onnx_precision.trt.flags import flags_by_release
from onnx_precision.trt.naming import trt_layer_names, trt_order
from onnx_precision.trt.versions import V

STRONG = "build the Cast-pinned model with --stronglyTyped (TensorRT 9.0 and later) instead"


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs=(("x", [4, 3]),), outputs=("y",), opset=17):
    graph = helper.make_graph(nodes, "g", [_vi(n, s) for n, s in inputs], [_vi(o, None) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def mixed_model():
    """Split ops, an unnamed node, and two nodes called 'dup', as an exporter may write them."""
    return model_of([
        helper.make_node("ReduceL2", ["x"], ["a"], name="rl2", axes=[1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Mul", ["r", "r"], ["m"], name="dup"),
        helper.make_node("Add", ["m", "r"], ["d"], name="dup"),
        helper.make_node("ReduceLogSumExp", ["d"], ["y"], name="rlse", axes=[0]),
    ])


def test_names_follow_generate_unique_name_with_one_counter():
    # registerLayer -> generateUniqueName: free name as is, else <name>_<counter>, the counter shared
    # by every collision in the network: rl2's SQRT takes 0, the second 'dup' 1, rlse's layers 2 and 3.
    names = trt_layer_names(mixed_model(), V("10.11"))
    assert [(n.base, [name for _, name in n.layers]) for n in names] == [
        ("rl2", [None, "rl2", "rl2_0"]),  # x*x is never registered
        ("node_of_r", ["node_of_r"]),
        ("dup", ["dup"]),
        ("dup", ["dup_1"]),
        ("rlse", ["rlse", "rlse_2", "rlse_3"]),
    ]
    assert [layer.kind for layer, _ in names[0].layers] == ["ElementWise PROD", "Reduce SUM", "Unary SQRT"]
    assert [layer.kind for layer in names[0].unreachable] == ["ElementWise PROD"]


def test_flags_use_the_names_in_the_file_after_the_loader_renamed_nodes():
    model = mixed_model()
    renamed = name_nodes(model)
    assert renamed == [("", "node_of_r"), ("dup", "dup_1")]
    plan = uniform_plan([n.name for n in model.graph.node], Precision.FP32, Reason("user", "test"))
    flags = trt_flags(model, plan, renamed=renamed)
    assert flags.weakly_typed_args() == [
        "--fp16", "--precisionConstraints=obey",
        "--layerPrecisions=rl2:fp32,rl2_*:fp32,node_of_r:fp32,dup:fp32,dup_*:fp32,rlse:fp32,rlse_*:fp32",
        "--layerOutputTypes=rl2:fp32,rl2_*:fp32,node_of_r:fp32,dup:fp32,dup_*:fp32,rlse:fp32,rlse_*:fp32",
    ]
    assert flags.problems == (
        (f"node 'rl2' (ReduceL2): onnx-tensorrt gives its ElementWise PROD layer(s) no name (TensorRT calls "
         f"them '(Unnamed Layer* N) [...]'), so no flag can keep them out of FP16; {STRONG}"),)


def test_second_duplicate_alone_is_pinned_by_pattern_when_the_first_has_one_layer():
    model = mixed_model()
    renamed = name_nodes(model)
    plan = uniform_plan([n.name for n in model.graph.node], Precision.FP16,
                        Reason("d", "")).with_fp32(["dup_1"])
    # The second 'dup' is layer dup_1 in TensorRT: 'dup_*' reaches it and nothing of the first 'dup'.
    flags = trt_flags(model, plan, renamed=renamed)
    assert flags.layer_precisions == (("dup_*", "fp32"),)
    assert flags.problems == ()


def test_pattern_that_would_reach_another_node_is_not_written():
    model = model_of([
        helper.make_node("ReduceLogSumExp", ["x"], ["a"], name="lse", axes=[1]),
        helper.make_node("Exp", ["a"], ["y"], name="lse_exp"),
    ])
    plan = uniform_plan(["lse", "lse_exp"], Precision.FP16, Reason("d", "")).with_fp32(["lse"])
    flags = trt_flags(model, plan)
    assert flags.layer_precisions == (("lse", "fp32"),)
    assert flags.problems == (
        ("node 'lse' (ReduceLogSumExp): its layers lse_0, lse_1 need the pattern 'lse_*', which would also "
         f"pin 'lse_exp' of node 'lse_exp'; rename the node, or {STRONG}"),)
    # Pinned too, the other node is no longer a clash.
    both = trt_flags(model, plan.with_fp32(["lse_exp"]))
    assert both.layer_precisions == (("lse", "fp32"), ("lse_*", "fp32"), ("lse_exp", "fp32"))
    assert both.problems == ()


def test_pattern_output_types_leave_out_bool_layers():
    model = model_of([helper.make_node("LpNormalization", ["x"], ["y"], name="lp", axis=1, p=2)])
    plan = uniform_plan(["lp"], Precision.FP32, Reason("user", "test"))
    flags = trt_flags(model, plan)
    assert [layer for layer, _ in flags.layer_precisions] == ["lp", "lp_*"]
    # lp_* reaches the (norm == 0) layer, whose output is bool: no output type for the pattern.
    assert flags.layer_output_types == (("lp", ("fp32",)),)


def test_cumsum_and_layernorm_flags_change_with_the_release():
    model = model_of([
        helper.make_node("CumSum", ["x", "axis"], ["c"], name="cs"),
        helper.make_node("LayerNormalization", ["c", "scale"], ["y"], name="ln"),
    ], inputs=(("x", [4, 3]), ("scale", [3])))
    model.graph.initializer.append(numpy_helper.from_array(np.array(1, dtype=np.int64), "axis"))
    plan = uniform_plan(["cs", "ln"], Precision.FP32, Reason("user", "test"))
    groups = flags_by_release(model, plan).groups
    assert [(str(g.releases[0]), str(g.releases[-1]), g.flags.layer_precisions) for g in groups] == [
        ("8.6", "10.0", ()),
        ("10.1", "10.7", (("ln", "fp32"),)),
        ("10.8", "10.11", (("cs", "fp32"), ("ln", "fp32"))),
    ]
    none_named = "onnx-tensorrt names none of its layers after it, so no flag can pin it"
    assert groups[0].flags.problems == (f"node 'cs' (CumSum): {none_named}; {STRONG}",
                                        f"node 'ln' (LayerNormalization): {none_named}; {STRONG}")
    assert groups[1].flags.problems == (f"node 'cs' (CumSum): {none_named}; {STRONG}",)


def test_parse_order_is_onnx_tensorrt_toposort():
    # A graph listed out of order is parsed producers first (post-order over inputs), which decides
    # which duplicate keeps the bare name.
    model = model_of([
        helper.make_node("Relu", ["a"], ["y"], name="dup"),
        helper.make_node("Neg", ["x"], ["a"], name="dup"),
    ])
    assert [n.op_type for n in trt_order(model.graph)] == ["Neg", "Relu"]
    assert [(n.op_type, n.named) for n in trt_layer_names(model, V("10.11"))] == [("Neg", ("dup",)),
                                                                                 ("Relu", ("dup_0",))]


def test_trtexec_before_9_1_has_no_patterns_so_extra_layers_are_written_down():
    model = mixed_model()
    renamed = name_nodes(model)
    plan = uniform_plan([n.name for n in model.graph.node], Precision.FP16,
                        Reason("d", "")).with_fp32(["rlse"])
    groups = flags_by_release(model, plan, renamed=renamed).groups
    assert [(str(g.releases[0]), str(g.releases[-1]), g.flags.layer_precisions) for g in groups] == [
        ("8.6", "9.0", (("rlse", "fp32"),)),
        ("9.1", "10.11", (("rlse", "fp32"), ("rlse_*", "fp32"))),
    ]
    assert groups[0].flags.problems == (
        ("node 'rlse' (ReduceLogSumExp): trtexec before 9.1 matches layer names exactly (no patterns), so "
         f"its layers rlse_2, rlse_3 cannot be named; {STRONG}"),)


def test_bool_io_has_no_trtexec_format_before_9_1():
    model = model_of([helper.make_node("Not", ["b"], ["nb"], name="not"),
                      helper.make_node("Where", ["nb", "x", "x"], ["y"], name="where")],
                     inputs=(("x", [2]),))
    model.graph.input.append(_vi("b", [2], TensorProto.BOOL))
    plan = uniform_plan(["not", "where"], Precision.FP16, Reason("d", ""), fp16_io=True)
    groups = flags_by_release(model, plan).groups
    assert groups[0].flags.input_formats == () and groups[0].flags.problems == (
        ("the I/O formats: trtexec before 9.1 has no name for bool or uint8 I/O, so "
         "--inputIOFormats/--outputIOFormats are left out (the engine keeps FP32 I/O)"),)
    assert groups[1].flags.weakly_typed_args() == ["--fp16", "--inputIOFormats=fp16:chw,bool:chw",
                                                   "--outputIOFormats=fp16:chw"]
