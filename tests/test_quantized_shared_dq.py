"""A DequantizeLinear shared by quantized groups written in different precisions is written once per
type, as onnxruntime gives each node unit its own DQ at load (EnsureUniqueDQForNodeUnit): NudeNet 320n
quantized by quantize_static had 68 Conv-group nodes kept FP32 only because their group shared an
activation DQ with an FP32 QLinearConcat group, and 5 DQ -> Cast -> Add where such a DQ fed an FP16
Add group."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from test_quantized_fusions import _fused_ops

from onnx_precision.cli import main


def shared_dq_block(c: int = 4) -> onnx.ModelProto:
    """Two UINT8 activations, each through one DQ (``dq_x``, ``dq_x2``) read by a Concat group (FP32:
    QLinearConcat) and an Add group, each then quantized and dequantized into a float tail; ``dq_x`` also
    feeds a Conv group (INT8 weight, INT32 bias) whose output is float (a Relu): what the Conv reads shows
    in an output, unrounded by a Q."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3
    w_scale = (np.abs(w).reshape(c, -1).max(axis=1) / 127).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("s_x", 0.0213), ("s_o", 0.1031))]
    inits += [numpy_helper.from_array(np.array(128, np.uint8), "zp"),
              numpy_helper.from_array(np.round(w / w_scale[:, None, None, None]).astype(np.int8), "w"),
              numpy_helper.from_array(w_scale, "ws"), numpy_helper.from_array(np.zeros(c, np.int8), "wz"),
              numpy_helper.from_array(rng.integers(-500, 500, c).astype(np.int32), "b"),
              numpy_helper.from_array((0.0213 * w_scale).astype(np.float32), "bs"),
              numpy_helper.from_array(np.zeros(c, np.int32), "bz")]
    node = helper.make_node
    nodes = [node("QuantizeLinear", ["x", "s_x", "zp"], ["xq"], name="q_x"),
             node("QuantizeLinear", ["x2", "s_x", "zp"], ["x2q"], name="q_x2"),
             node("DequantizeLinear", ["xq", "s_x", "zp"], ["xd"], name="dq_x"),
             node("DequantizeLinear", ["x2q", "s_x", "zp"], ["x2d"], name="dq_x2"),
             node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], name="dq_w", axis=0),
             node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], name="dq_b", axis=0),
             node("Concat", ["xd", "x2d"], ["cat"], name="concat", axis=1),
             node("QuantizeLinear", ["cat", "s_o", "zp"], ["catq"], name="q_cat"),
             node("DequantizeLinear", ["catq", "s_o", "zp"], ["catd"], name="dq_cat"),
             node("GlobalAveragePool", ["catd"], ["y"], name="pool"),
             node("Conv", ["xd", "wd", "bd"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
             node("Relu", ["conv_out"], ["z"], name="relu"),
             node("Add", ["xd", "x2d"], ["sum"], name="add"),
             node("QuantizeLinear", ["sum", "s_o", "zp"], ["sumq"], name="q_sum"),
             node("DequantizeLinear", ["sumq", "s_o", "zp"], ["sumd"], name="dq_sum"),
             node("Sigmoid", ["sumd"], ["v"], name="sigmoid")]
    shape = [1, c, 8, 8]
    graph = helper.make_graph(
        nodes, "shared_dq", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "x2")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * c, 1, 1]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def dq_casts(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(DQ, reader) for every DequantizeLinear -> Cast -> any node in ``model``."""
    made = {out: node for node in model.graph.node for out in node.output}
    return [(made[cast.input[0]].name, reader.name) for reader in model.graph.node for name in reader.input
            for cast in [made.get(name)] if cast is not None and cast.op_type == "Cast"
            and cast.input[0] in made and made[cast.input[0]].op_type == "DequantizeLinear"]


def _convert(tmp_path, name: str = "o") -> tuple[list[str], dict, dict, onnx.ModelProto, str]:
    path, out, plan = (str(tmp_path / f) for f in ("m.onnx", f"{name}.onnx", f"{name}.plan.json"))
    onnx.save(shared_dq_block(), path)
    assert main(["convert", path, "-o", out, "--save-plan", plan]) == 0
    report = json.load(open(str(tmp_path / f"{name}.report.json")))
    return [], report, json.load(open(plan))["nodes"], onnx.load(out), out


COPY_NOTE = ("note: 2 shared DequantizeLinear(s) kept FP32 are given a copy in FP16 for their FP16 readers "
             "('dq_x', 'dq_x2'; each named '<dq>__fp16'), so that no Cast sits between a DQ and its reader "
             "(onnxruntime/core/optimizer/qdq_transformer/ensure_unique_dq_for_node_unit.cc at "
             "microsoft/onnxruntime 0ae9bc1e does the same at load)")


def test_a_dq_shared_with_an_fp32_concat_group_is_copied_for_its_fp16_readers(tmp_path, capsys):
    # before: dq_x and dq_x2, FP32 for the Concat group (QLinearConcat takes float32 scales only), pulled the
    # Conv group (conv, dq_w, dq_b) to FP32 and reached the FP16 Add through DQ -> Cast -> Add
    _, report, decisions, written, out = _convert(tmp_path)
    printed = capsys.readouterr().out.splitlines()
    assert report["status"] == "passed" and report["pinned"] == [] and COPY_NOTE in printed
    assert {m: decisions[m]["precision"] for m in ("dq_x", "dq_x2", "concat", "q_cat")} == dict.fromkeys(
        ("dq_x", "dq_x2", "concat", "q_cat"), "fp32")
    assert {decisions[m]["precision"] for m in ("dq_w", "dq_b", "conv", "add", "q_sum", "relu")} == {"fp16"}
    nodes = {n.name: n for n in written.graph.node}
    # the model's node names kept, one copy per shared DQ, each before its first reader
    assert [n.name for n in written.graph.node if n.op_type != "Cast"] == [
        "q_x", "q_x2", "dq_x", "dq_x2", "dq_w", "dq_b", "concat", "q_cat", "dq_cat", "pool", "dq_x__fp16",
        "conv", "relu", "dq_x2__fp16", "add", "q_sum", "dq_sum", "sigmoid"]
    assert list(nodes["concat"].input) == ["xd", "x2d"]
    assert list(nodes["conv"].input) == ["xd__fp16", "wd", "bd"]
    assert list(nodes["add"].input) == ["xd__fp16", "x2d__fp16"]
    assert list(nodes["dq_x__fp16"].input) == ["xq", "s_x_fp16", "zp"]
    assert nodes["dq_x__fp16"].doc_string.startswith(
        "onnx-precision: DequantizeLinear 'dq_x' in FP16 for its FP16 reader(s), first 'conv', where 'dq_x' "
        "stays FP32 for the others: one DQ per type")
    types = {v.name: v.type.tensor_type.elem_type
             for v in onnx.shape_inference.infer_shapes(written).graph.value_info}
    types.update({t.name: t.data_type for t in written.graph.initializer})
    assert types["s_x"] == types["xd"] == TensorProto.FLOAT
    assert types["s_x_fp16"] == types["xd__fp16"] == types["wd"] == types["conv_out"] == TensorProto.FLOAT16
    assert dq_casts(written) == []
    # onnxruntime loads it at its default options, the Concat group fused into QLinearConcat
    assert _fused_ops(out, tmp_path)["QLinearConcat"] == 1
    # the search measured what is written: the Conv's output is no Q's, so a DQ copy emulated as the FP32
    # DQ's output rounded would differ (rel RMS err 0.008118 searched, 0.008128 written)
    after, verified = (report["outputs"][k]["outputs"] for k in ("after", "verified"))
    assert after == verified


def test_the_copies_are_written_deterministically(tmp_path):
    first, second = (_convert(tmp_path, name)[4] for name in ("a", "b"))
    assert open(first, "rb").read() == open(second, "rb").read()


def test_a_shared_dq_pinned_alone_is_not_copied_for_readers_all_16_bit(tmp_path):
    # without the Concat group no reader of dq_x is FP32 in every plan: pinned by the user, a copy for its
    # 16-bit readers (Conv, Add) would leave dq_x itself unread in the file; it keeps its Cast, its Conv
    # group goes FP32 with it, as before
    model = shared_dq_block()
    kept = [n for n in model.graph.node if n.name not in ("concat", "q_cat", "dq_cat", "pool")]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    del model.graph.output[0]
    path, out, plan = str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx"), str(tmp_path / "p.json")
    onnx.save(model, path)
    assert main(["convert", path, "-o", out, "--keep-fp32", "dq_x", "--save-plan", plan, "-q"]) == 0
    written = onnx.load(out)
    assert not [n.name for n in written.graph.node if n.name.endswith("__fp16")]
    read = {name for n in written.graph.node for name in n.input} | {o.name for o in written.graph.output}
    assert all(o in read for n in written.graph.node for o in n.output)
    assert json.load(open(plan))["nodes"]["conv"]["precision"] == "fp32"
