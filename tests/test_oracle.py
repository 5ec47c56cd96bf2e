"""The FP16 oracles: the switch-graph emulation, emulate_model, native CPU and reference modes."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import parse, unfused

from models import BUILDERS
from onnx_precision.context import ModelContext
from onnx_precision.graph import name_nodes, walk_nodes
from onnx_precision.judge import Tolerance, compare_samples
from onnx_precision.oracle import (
    EmulationSession,
    emulate_model,
    inspect_plan,
    layerwise,
    reference_stats,
    round_fp16,
    run_emulated,
    run_fp32,
    run_native,
    run_reference,
    tensor_stats,
)
from onnx_precision.plan import Precision, Reason, uniform_plan
from onnx_precision.policy import resolution as resolve_module
from onnx_precision.rewriter import rewrite

L2 = """
<ir_version: 8, opset_import: ["" : 17]>
l2 (float[1, 64] x) => (float[1, 64] y) {
    axes = Constant <value = int64[1] {-1}> ()
    sq = Mul (x, x)
    ss = ReduceSum <keepdims = 1> (sq, axes)
    norm = Sqrt (ss)
    y = Div (x, norm)
}
"""

# Elementwise ops only: FP16 arithmetic in numpy (reference mode) and FP32 compute + FP16 store
# (emulation) must give the same bits.
ELEMENTWISE = """
<ir_version: 8, opset_import: ["" : 17]>
ew (float[2, 8] a, float[2, 8] b) => (float[2, 8] y) {
    s = Add (a, b)
    p = Mul (s, a)
    d = Sub (p, b)
    r = Relu (d)
    q = Div (r, b)
    y = Neg (q)
}
"""


def named(text: str) -> onnx.ModelProto:
    model = parse(text)
    name_nodes(model)
    return model


def plan_of(model: onnx.ModelProto, precision: Precision = Precision.FP16, fp16_io: bool = False):
    return uniform_plan([r.name for r in walk_nodes(model.graph)], precision, Reason("default", "test"),
                        fp16_io=fp16_io)


def example(name: str):
    ex = BUILDERS[name]()
    model = onnx.ModelProto()
    model.CopyFrom(ex.model)
    name_nodes(model)
    return model, list(ex.feeds)


def plain_fp32(model: onnx.ModelProto, feed: dict) -> dict:
    """The FP32 model in a default onnxruntime session (no oracle code involved)."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, session.run(names, feed)))


X50 = {"x": np.full((1, 64), 50.0, np.float32)}  # sum of squares 160000 > 65504


def test_all_fp32_is_bit_identical_to_the_fp32_model():
    for name in ("l2_normalize", "layernorm_eps", "nafnet_boxfilter", "if_branch", "benign_mlp", "fp32_nan"):
        model, feeds = example(name)
        ctx = ModelContext.of(model)
        session = EmulationSession(ctx)
        # an all-FP32 plan writes a LayerNorm as one FP32 LayerNormalization, and is emulated so (below)
        for plan in (None,) if name == "layernorm_eps" else (None, plan_of(model, Precision.FP32)):
            for feed in feeds:
                got = session.run(plan, feed)
                want = run_fp32(ctx, [feed]).outputs[0]
                for out in want:
                    assert got[out].tobytes() == want[out].tobytes(), (name, out)
    # And against a default onnxruntime session where fusions cannot change the numbers.
    model = named(L2)
    emulated = EmulationSession(ModelContext.of(model)).run(None, X50)["y"]
    assert emulated.tobytes() == plain_fp32(model, X50)["y"].tobytes()


def test_l2_normalize_collapses_in_emulation_but_not_natively_on_cpu(caplog):
    """The trap: onnxruntime CPU runs FP16 nodes in FP32. Keep this contrast so the oracle never
    silently falls back to native CPU."""
    ctx = ModelContext.of(named(L2))
    plan = plan_of(ctx.model)
    fp16_ctx = ModelContext.of(rewrite(ctx, plan).model)

    emulated = EmulationSession(ctx).run(plan, X50)["y"]
    assert np.all(emulated == 0.0)  # 160000 overflows to inf, x / inf == 0
    written = run_emulated(fp16_ctx, [X50])
    assert written.oracle == "emulate" and np.all(written.outputs[0]["y"] == 0.0)

    native = run_native(fp16_ctx, [X50], "CPUExecutionProvider")
    assert native.oracle == "native:CPUExecutionProvider"
    np.testing.assert_allclose(native.outputs[0]["y"].astype(np.float32), 0.125)
    assert "hides FP16 overflow" in caplog.text

    refs = run_fp32(ctx, [X50]).outputs
    assert not compare_samples(refs, [{"y": emulated}], Tolerance(), "emulate").passed
    assert compare_samples(refs, [{"y": native.outputs[0]["y"].astype(np.float32)}], Tolerance(),
                           native.oracle).passed


def test_no_optimization_level_folds_the_rounding_away():
    """The oracle runs at ORT_DISABLE_ALL; even the most aggressive level keeps the Cast pairs."""
    model = named(L2)
    emulated = emulate_model(rewrite(ModelContext.of(model), plan_of(model)).model, ".")
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        session = ort.InferenceSession(emulated.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        assert np.all(session.run(["y"], X50)[0] == 0.0), level


def test_reference_mode_agrees_with_emulation_where_op_internals_do_not_matter():
    model = named(ELEMENTWISE)
    gen = np.random.default_rng(0)
    feed = {"a": gen.uniform(-300, 300, (2, 8)).astype(np.float32),
            "b": gen.uniform(0.5, 3, (2, 8)).astype(np.float32)}
    plan = plan_of(model, fp16_io=True)
    ctx = ModelContext.of(model)
    reference = run_reference(ModelContext.of(rewrite(ctx, plan).model), [feed])
    assert reference.oracle == "reference"
    ref_y = reference.outputs[0]["y"]
    assert ref_y.dtype == np.float16
    emulated = EmulationSession(ctx).run(plan, feed)["y"]
    assert emulated.tobytes() == ref_y.astype(np.float32).tobytes()
    # The FP16 result really differs from FP32 here, so the agreement means something.
    assert not np.array_equal(emulated, run_fp32(ctx, [feed]).outputs[0]["y"])


@pytest.mark.parametrize("name", ["l2_normalize", "layernorm_eps", "two_culprits", "if_branch",
                                  "nafnet_boxfilter"])
def test_switch_emulation_equals_emulating_the_written_model(name):
    """Running plan P in the switch graph == emulating the model the rewriter writes for P."""
    model, feeds = example(name)
    ctx = ModelContext.of(model)
    session = EmulationSession(ctx)
    nodes = [r.name for r in walk_nodes(model.graph)]
    all16 = plan_of(model)
    plans = [all16, all16.with_fp32(nodes[::2]), all16.with_fp32(nodes[1::2]), plan_of(model, fp16_io=True),
             plan_of(model, Precision.FP32)]
    for plan in plans:
        written = ModelContext.of(rewrite(ctx, plan).model)  # layernorm_eps: one LayerNormalization
        for feed in feeds:
            want = run_emulated(written, [feed]).outputs[0]
            got = session.run(plan, feed)
            for out in want:
                assert got[out].tobytes() == want[out].astype(np.float32).tobytes(), (plan.fp32_nodes, out)
    assert session.sessions_built == 1
    assert session.probes_run == len(plans) * len(feeds)


def test_random_plans_on_a_transformer_match_the_written_model_bit_for_bit():
    """Its LayerNorms written as LayerNormalizations, the tails split by the plans pinned FP32."""
    from models import transformer
    ex = transformer(layers=2, d_model=16, heads=2, seq=4, ff=32, outlier_layers=(1,))
    model = ex.model
    name_nodes(model)
    nodes = [r.name for r in walk_nodes(model.graph)]
    ctx = ModelContext.of(model)
    session = EmulationSession(ctx, capture_intermediates=False)
    gen = np.random.default_rng(1)
    all16 = plan_of(model)
    for share in (0.0, 0.2, 0.5, 0.8):
        plan = all16.with_fp32([n for n in nodes if gen.random() < share])
        written = rewrite(ctx, plan).model
        assert sum(n.op_type == "LayerNormalization" for n in written.graph.node) == 4
        want = run_emulated(ModelContext.of(written), ex.feeds).outputs[0]["y"]
        assert session.run(plan, ex.feeds[0])["y"].tobytes() == want.astype(np.float32).tobytes(), share
    assert session.sessions_built == 1 and session.intermediates == ()


def test_groups_of_nodes_give_the_bits_of_one_if_per_node(monkeypatch):
    """Runs of consecutive nodes share one If per uniform plan (all FP16 / all FP32) and fall back
    to one If per node when mixed: every output and intermediate keeps the bits of per-node Ifs."""
    from models import transformer
    from onnx_precision.oracle import switch_builder
    ex = transformer(layers=1, d_model=16, heads=2, seq=4, ff=32)
    model = ex.model
    name_nodes(model)
    nodes = [r.name for r in walk_nodes(model.graph)]
    grouped = EmulationSession(ModelContext.of(model))
    size = switch_builder.GROUP_SIZE
    monkeypatch.setattr(switch_builder, "GROUP_SIZE", 1)
    single = EmulationSession(ModelContext.of(model))
    groups = grouped.switch_model.groups
    assert single.switch_model.groups == () and len(groups) >= 2
    assert size > 1 and max(len(g.nodes) for g in groups) == size
    switch_inputs = [vi.name for vi in grouped.switch_model.model.graph.input
                     if vi.type.tensor_type.elem_type == onnx.TensorProto.BOOL]
    assert switch_inputs == [grouped.switch_model.switch_input]
    all16 = plan_of(model)
    first = list(groups[0].nodes)
    uniform = all16.with_fp32(first)
    vector = grouped.switch_feed(uniform)[grouped.switch_model.switch_input]
    order = grouped.switch_model.switch_order
    assert not vector[order.index(groups[0].on)] and not vector[order.index(groups[0].mixed)]
    assert vector[order.index(groups[1].on)] and not vector[order.index(groups[1].mixed)]
    mixed = all16.with_fp32(first[:3])
    assert grouped.switch_feed(mixed)[grouped.switch_model.switch_input][order.index(groups[0].mixed)]
    for plan in (None, all16, uniform, mixed, all16.with_fp32(nodes[::3])):
        want = single.run(plan, ex.feeds[0], intermediates=True)
        got = grouped.run(plan, ex.feeds[0], intermediates=True)
        assert list(got) == list(want)
        for name in want:
            assert got[name].tobytes() == want[name].tobytes(), (name, plan and plan.fp32_nodes)


def test_external_data_models_and_weights_rounded_at_run_time(tmp_path, monkeypatch):
    from models import transformer
    from onnx_precision.context import load_model
    from onnx_precision.oracle import switch_builder
    ex = transformer(layers=1, d_model=16, heads=2, seq=4, ff=32)
    path = str(tmp_path / "t.onnx")
    external = onnx.ModelProto()
    external.CopyFrom(ex.model)  # onnx.save moves the tensors of the proto it saves out
    onnx.save(external, path, save_as_external_data=True, location="t.data", size_threshold=0)
    loaded = load_model(path)
    plan = plan_of(loaded.model)
    want_fp32 = run_fp32(loaded, ex.feeds).outputs[0]["y"]
    written = rewrite(ModelContext.of(ex.model), plan_of(ex.model), fuse_layer_norms=False).model
    want_fp16 = run_emulated(ModelContext.of(written), ex.feeds).outputs[0]["y"]
    for limit in (switch_builder.PROTO_LIMIT, 0):  # 0: no room for precomputed rounded weights
        monkeypatch.setattr(switch_builder, "PROTO_LIMIT", limit)
        session = EmulationSession(loaded, capture_intermediates=False)
        rounded_inits = [i.name for i in session.switch_model.model.graph.initializer
                         if i.name.endswith("__rounded")]
        assert bool(rounded_inits) == (limit > 0)
        assert session.run(None, ex.feeds[0])["y"].tobytes() == want_fp32.tobytes()
        assert session.run(plan, ex.feeds[0])["y"].tobytes() == want_fp16.astype(np.float32).tobytes()


def mlp_with_large_weights() -> onnx.ModelProto:
    """Two 256 x 256 MatMuls: weights over emulation.INLINE_EXTERNAL_BYTES even in FP16, so
    saved as external data they stay external in every emulation graph."""
    gen = np.random.default_rng(3)
    w1, w2 = (gen.standard_normal((256, 256)).astype(np.float32) / 8 for _ in range(2))
    nodes = [onnx.helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             onnx.helper.make_node("Relu", ["h"], ["r"], name="relu"),
             onnx.helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    f = onnx.TensorProto.FLOAT
    graph = onnx.helper.make_graph(nodes, "mlp", [onnx.helper.make_tensor_value_info("x", f, [2, 256])],
                                   [onnx.helper.make_tensor_value_info("y", f, [2, 256])],
                                   [onnx.numpy_helper.from_array(w1, "w1"),
                                    onnx.numpy_helper.from_array(w2, "w2")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def saved_external(model: onnx.ModelProto, path: str):
    from onnx_precision.context import load_model
    from onnx_precision.storage import save_model
    save_model(model, path, external_data=True)
    return load_model(path)


MLP_FEED = {"x": np.random.default_rng(4).standard_normal((2, 256)).astype(np.float32)}


def test_emulating_a_written_model_leaves_its_external_fp16_weights_external(tmp_path):
    from onnx_precision.storage import external_location
    model = mlp_with_large_weights()
    written = rewrite(ModelContext.of(model), plan_of(model)).model
    loaded = saved_external(written, str(tmp_path / "fp16.onnx"))
    emulated = emulate_model(loaded.model, loaded.base_dir)
    weights = list(emulated.graph.initializer)
    assert len(weights) == 2 and all(t.data_type == onnx.TensorProto.FLOAT16 for t in weights)
    assert all(external_location(t) == "fp16.onnx.data" for t in weights)
    assert emulated.ByteSize() < 4096  # no FP32 copy of the weights in the proto
    fp16_names = {t.name for t in weights}
    casts = [n for n in emulated.graph.node if n.op_type == "Cast" and n.input[0] in fp16_names]
    assert sorted(n.output[0] for n in casts) == ["w1", "w2"]
    got = run_emulated(loaded, [MLP_FEED]).outputs[0]["y"]
    # inline: FP32 initializers in the proto
    want = run_emulated(ModelContext.of(written), [MLP_FEED]).outputs[0]["y"]
    assert got.tobytes() == want.tobytes()


def test_switch_graph_rounds_external_weights_in_the_fp16_branch(tmp_path):
    from onnx_precision.storage import external_location
    model = mlp_with_large_weights()
    name_nodes(model)
    loaded = saved_external(model, str(tmp_path / "fp32.onnx"))
    session = EmulationSession(loaded, capture_intermediates=False)
    weights = [t for t in session.switch_model.model.graph.initializer
               if t.data_type == onnx.TensorProto.FLOAT]
    assert [t.name for t in weights] == ["w1", "w2"]  # no rounded copy
    assert all(external_location(t) == "fp32.onnx.data" for t in weights)
    ctx = ModelContext.of(model)
    assert session.run(None, MLP_FEED)["y"].tobytes() == run_fp32(ctx, [MLP_FEED]).outputs[0]["y"].tobytes()
    all16 = plan_of(model)
    for plan in (all16, all16.with_fp32(["mm1"]), all16.with_fp32(["mm2"])):
        want = run_emulated(ModelContext.of(rewrite(ctx, plan).model), [MLP_FEED]).outputs[0]["y"]
        assert session.run(plan, MLP_FEED)["y"].tobytes() == want.tobytes(), plan.fp32_nodes
    assert session.run(all16, MLP_FEED)["y"].tobytes() != session.run(None, MLP_FEED)["y"].tobytes()


WINDOW = """
<ir_version: 8, opset_import: ["" : 17]>
win (int64 n) => (float[N] y) {
    y = BlackmanWindow (n)
}
"""


def test_window_ops_written_in_fp16_are_emulated_in_fp32_then_rounded():
    """The rewriter makes BlackmanWindow's output_datatype FLOAT16; the emulation of the written
    model computes the window in FP32 and rounds it, as the switch graph does (computed in FP16,
    its first value is -0.0, not 0.0)."""
    model = named(WINDOW)
    ctx = ModelContext.of(model)
    plan = plan_of(model)
    written = rewrite(ctx, plan).model
    assert "output_datatype" in {a.name for n in written.graph.node for a in n.attribute}
    feed = {"n": np.array(10, np.int64)}
    want = run_emulated(ModelContext.of(written), [feed]).outputs[0]["y"]
    assert EmulationSession(ctx).run(plan, feed)["y"].tobytes() == want.tobytes()


def test_capturing_a_subset_of_intermediates():
    model = named(L2)
    session = EmulationSession(ModelContext.of(model), capture_intermediates=["ss"])
    assert session.intermediates == ("ss",)
    assert set(session.run(None, X50, intermediates=True)) == {"y", "ss"}
    assert set(session.run(None, X50)) == {"y"}


LOOP = """
<ir_version: 8, opset_import: ["" : 17]>
lp (float[4] x, int64 n) => (float[4] y, float[N, 4] scan_out) {
    cond = Constant <value = bool {1}> ()
    y, scan_out = Loop (n, cond, x) <body = body (int64 i, bool c_in, float[4] acc)
                                               => (bool c_out, float[4] acc_out, float[4] s) {
        c_out = Identity (c_in)
        k = Constant <value = float {300.0}> ()
        m = Mul (acc, k)
        acc_out = Div (m, k)
        s = Sqrt (m)
    }>
}
"""


def test_loop_bodies_read_switches_from_the_outer_scope():
    model = named(LOOP)
    feed = {"x": np.array([1.1, 2.2, 3.3, 400.0], np.float32), "n": np.array(3, np.int64)}
    ctx = ModelContext.of(model)
    session = EmulationSession(ctx)
    ref = run_fp32(ctx, [feed]).outputs[0]
    assert all(session.run(None, feed)[k].tobytes() == ref[k].tobytes() for k in ref)
    nodes = [r.name for r in walk_nodes(model.graph)]
    only_mul = plan_of(model, Precision.FP32).with_fp16(["node_of_m"])
    for plan in (plan_of(model), only_mul, plan_of(model).with_fp32(["node_of_y"])):
        want = run_emulated(ModelContext.of(rewrite(ctx, plan).model), [feed]).outputs[0]
        got = session.run(plan, feed)
        for k in want:
            assert got[k].tobytes() == want[k].astype(np.float32).tobytes(), (plan.fp32_nodes, k)
    assert np.isinf(session.run(only_mul, feed)["scan_out"][1, 3])  # 400 * 300**2 overflows in the body
    assert len(nodes) == 7


SCAN_OPSET8 = """
<ir_version: 8, opset_import: ["" : 8]>
sc (float[1, 2] initial, float[1, 3, 2] x) => (float[1, 2] y, float[1, 3, 2] z) {
    y, z = Scan ("", initial, x) <num_scan_inputs = 1, body = body (float[2] sum_in, float[2] next)
                                                              => (float[2] sum_out, float[2] scan_out) {
        sum_out = Add (sum_in, next)
        scan_out = Identity (sum_out)
    }>
}
"""

SEQUENCE = """
<ir_version: 8, opset_import: ["" : 17]>
sq (float[6] x) => (float[3] y) {
    seq = SplitToSequence <axis = 0> (x)
    first = SequenceAt (seq, zero)
    y = Mul (first, first)
}
"""

HALF_IO = """
<ir_version: 8, opset_import: ["" : 17]>
hf (float16[4] x) => (float16[4] y) {
    up = Cast <to = 1> (x)
    sq = Mul (up, up)
    y = Cast <to = 10> (sq)
}
"""


@pytest.mark.parametrize("text, feed", [
    (SCAN_OPSET8, {"initial": np.array([[1.0, 2.0]], np.float32),
                   "x": np.array([[[3.1, 4.1], [5.1, 6.1], [7.1, 8.1]]], np.float32)}),
    (SEQUENCE, {"x": np.linspace(300.0, 301.0, 6, dtype=np.float32)}),
    (HALF_IO, {"x": np.array([1.5, 300.0, -2.25, 0.1], np.float16)}),
], ids=["scan-opset8", "sequence", "fp16-io-model"])
def test_old_opsets_sequences_and_models_already_holding_fp16(text, feed):
    """Cases the ONNX backend suite found: no Where before opset 9, If branches returning
    sequences, and a model with FP16 tensors of its own (emulated, not run natively)."""
    model = named(text)
    if "zero" in text:
        model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"))
    ctx = ModelContext.of(model)
    session = EmulationSession(ctx)
    ref = run_fp32(ctx, [feed]).outputs[0]
    assert all(session.run(None, feed)[k].tobytes() == ref[k].tobytes() for k in ref)
    plan = plan_of(model)
    want = run_emulated(ModelContext.of(rewrite(ctx, plan).model), [feed]).outputs[0]
    got = session.run(plan, feed)
    for k in want:
        assert got[k].tobytes() == want[k].astype(np.float32).tobytes(), k


def test_ir3_initializers_listed_as_inputs_are_constants(monkeypatch):
    w = np.array([0.1, 0.2, 0.3, 70000.0], np.float32)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Mul", ["x", "w"], ["y"], name="scale")], "ir3",
        [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [4]) for n in ("x", "w")],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
        [onnx.numpy_helper.from_array(w, "w")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 8)])
    model.ir_version = 3
    ctx = ModelContext.of(model)
    # 70000 would force FP32: keep it switchable
    monkeypatch.setattr(resolve_module, "_forced_fp32", lambda c: frozenset())
    session = EmulationSession(ctx)
    feed = {"x": np.ones(4, np.float32)}
    assert session.run(None, feed)["y"].tobytes() == w.tobytes()
    assert session.run(plan_of(model), feed)["y"].tolist()[3] == np.inf  # the FP16 copy of w overflows
    assert any(i.name.startswith("w__rounded") for i in session.switch_model.model.graph.initializer)


def test_subgraph_nodes_are_switched_through_outer_scope():
    model, feeds = example("if_branch")
    session = EmulationSession(ModelContext.of(model))
    ref = session.run(None, feeds[0])["y"]
    only_then_sumsq = plan_of(model, Precision.FP32).with_fp16(["then_sumsq"])
    assert np.all(session.run(only_then_sumsq, feeds[0])["y"] == 0.25)  # x / inf + bias
    assert not np.any(ref == 0.25)
    only_else = plan_of(model, Precision.FP32).with_fp16(["else_scale"])
    assert session.run(only_else, feeds[0])["y"].tobytes() == ref.tobytes()  # branch not taken


def test_constants_fp16_cannot_hold_keep_their_node_fp32():
    model, feeds = example("layernorm_eps")
    session = EmulationSession(ModelContext.of(model))
    assert "ln_add_eps" in session.always_fp32  # eps 1e-12 flushes to zero in FP16
    assert "ln_add_eps" not in session.switchable


def test_reference_stats_ranges_and_first_nonfinite():
    model = named(L2)
    session = EmulationSession(ModelContext.of(model))
    x_small = {"x": np.full((1, 64), 0.5, np.float32)}
    ref = reference_stats(session, [x_small, X50])  # worst case over both samples
    ss = ref.stats["ss"]
    assert ss.max_abs == 160000.0 and ss.overflows_fp16 and ss.finite
    assert ref.stats["sq"].min_nonzero_abs == 0.25
    assert ref.stats["x"].max_abs == 50.0
    assert ref.producers["ss"] == "node_of_ss"
    assert ref.first_nonfinite is None
    assert [o["y"][0, 0] for o in ref.outputs] == [0.125, 0.125]

    nan_model, feeds = example("fp32_nan")
    nan_ref = reference_stats(EmulationSession(ModelContext.of(nan_model)), feeds)
    assert nan_ref.first_nonfinite == "sqrt"
    assert nan_ref.stats["r"].nan_count == int(np.count_nonzero(feeds[0]["x"] < 0)) > 0


def test_tensor_stats_flush_fraction_and_nonfinite_counts():
    values = np.array([0.0, 1e-9, 2.0 ** -25, 1e-7, 3.0, -70000.0, np.inf, np.nan], np.float32)
    s = tensor_stats(values)
    assert (s.nan_count, s.inf_count, s.size) == (1, 1, 8)
    assert s.max_abs == np.inf
    assert s.min_nonzero_abs == np.float32(1e-9)
    # nonzero non-NaN: 1e-9, 2**-25, 1e-7, 3, 70000, inf -> 1e-9 and 2**-25 flush to zero
    assert s.flush_fraction == pytest.approx(2 / 6)
    assert round_fp16(values[1:4]).tolist()[:2] == [0.0, 0.0]


def test_layerwise_names_the_nodes_where_error_appears():
    model, feeds = example("two_culprits")
    session = EmulationSession(ModelContext.of(model))
    ref, lw = inspect_plan(session, plan_of(model), feeds)
    assert lw.first_divergence == ("a_sumsq", "b_exp")
    assert lw.nodes["a_sumsq"].new_nonfinite == 1
    assert not lw.nodes["a_norm"].diverges  # inherits the Inf, does not create it
    assert lw.ranked()[0] in ("a_sumsq", "a_norm", "b_exp", "b_sum_exp", "b_normalize")
    assert ref.first_nonfinite is None
    # the plan's own outputs come with it, for compare
    assert not compare_samples(ref.outputs, lw.outputs, Tolerance(), "emulate").passed
    # layerwise() alone gives the same answer
    assert layerwise(session, plan_of(model), feeds).first_divergence == lw.first_divergence
    # An FP16 consumer rounds its input: with Exp and its sum in FP32, the FP16 Div still sees
    # exp(z) > 65504 as Inf, and the divergence moves there.
    partly = plan_of(model).with_fp32(["a_sumsq", "a_norm", "b_exp", "b_sum_exp"])
    assert layerwise(session, partly, feeds).first_divergence == ("b_normalize",)
    fixed = partly.with_fp32(["b_normalize"])
    assert layerwise(session, fixed, feeds).first_divergence == ()


@pytest.mark.slow  # 1.3 s in a full run on 2 busy cores
def test_an_overflow_downstream_of_another_is_still_a_first_divergence():
    """Layer 8's Pow overflows although layer 3's overflow already put error into its inputs (node by
    node, below opset 17: from 17 the statistics are FP32 inside each written LayerNormalization)."""
    from models import transformer
    ex = transformer()  # 12 layers, outliers in layers 3 and 8
    model = unfused(ex.model)
    name_nodes(model)
    session = EmulationSession(ModelContext.of(model), capture_intermediates=True)
    lw = layerwise(session, plan_of(model), ex.feeds)
    assert lw.first_divergence == ("l3_ln2_sq", "l8_ln2_sq")
    assert lw.nodes["l8_ln2_sq"].input_rel_err > 0.01  # its inputs were already off


def test_emulate_model_rounds_fp16_inputs_and_casts():
    model = named(L2)
    written = rewrite(ModelContext.of(model), plan_of(model, fp16_io=True)).model
    assert written.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    emulated = emulate_model(written, ".")
    assert emulated.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert emulated.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    x = {"x": np.full((1, 64), 0.1, np.float32)}  # 0.1 is not an FP16 value: it is rounded on entry
    y = run_emulated(ModelContext.of(written), [x]).outputs[0]["y"]
    assert y.dtype == np.float32
    assert y[0, 0] == round_fp16(np.float32(round_fp16(np.float32(0.1))) / np.float32(0.8))


def test_the_emulated_proto_is_gone_before_onnxruntime_parses_it(monkeypatch):
    """run_emulated hands onnxruntime the emulated model's bytes with no proto of it alive (each was
    25-35 MB of the verification's peak on a 26 MB model), and the outputs are the proto's."""
    import gc

    from onnx_precision.oracle import sessions

    model = mlp_with_large_weights()
    written = ModelContext.of(rewrite(ModelContext.of(model), plan_of(model)).model)
    alive: list[int] = []

    def emulated_protos(*args, **kwargs):
        # the emulation's rounding nodes write "<tensor>__exact" outputs: only an emulated proto has them
        alive.append(sum(1 for m in gc.get_objects() if isinstance(m, onnx.ModelProto)
                         and any(o.endswith("__exact") for n in m.graph.node for o in n.output)))
        return real(*args, **kwargs)

    real = sessions.weighted_session
    monkeypatch.setattr(sessions, "weighted_session", emulated_protos)
    got = run_emulated(written, [MLP_FEED]).outputs[0]["y"]
    assert alive == [0]
    emulated = emulate_model(written.model, written.base_dir)
    session = ort.InferenceSession(emulated.SerializeToString(), sessions.session_options())
    want = session.run(None, MLP_FEED)[0]
    assert got.tobytes() == want.tobytes()


def test_a_written_file_is_verified_with_no_proto_of_it_alive_beside_onnxruntimes(tmp_path, monkeypatch):
    """The verification reads the written file back for its emulated run alone and emulates that proto
    in place: when onnxruntime parses the emulation, no proto of the model is alive (the read-back
    model and its emulated copy were each 25-35 MB of a 26 MB model's peak). Its verdict is the
    emulation's of the model in memory."""
    import gc

    from onnx_precision.oracle import sessions, validate_written, verify_output
    from onnx_precision.storage import save_model

    model = mlp_with_large_weights()
    written = rewrite(ModelContext.of(model), plan_of(model)).model
    path = str(tmp_path / "fp16.onnx")
    save_model(written, path)
    want = run_emulated(ModelContext.of(written), [MLP_FEED]).outputs
    alive: list[int] = []

    def protos_of_the_model(*args, **kwargs):
        alive.append(sum(1 for m in gc.get_objects() if isinstance(m, onnx.ModelProto)
                         and any(n.name == "mm1" for n in m.graph.node)))
        return real(*args, **kwargs)

    real = sessions.weighted_session
    monkeypatch.setattr(sessions, "weighted_session", protos_of_the_model)
    del model, written
    tol = Tolerance()
    verified, native, _ = verify_output(path, [MLP_FEED], want, tol)
    validation, failure = validate_written(path, [MLP_FEED], want, tol)
    assert alive == [0, 0]
    assert verified.passed and native is None and validation.passed and failure == ""
    assert verified.worst() is not None and verified.worst().rel_rms_err == 0.0


@pytest.mark.slow  # 1.3 s in a full run on 2 busy cores
def test_a_conversion_does_not_import_onnx_reference():
    """onnx.reference (12 MB of a process's memory once imported) is loaded by the reference oracle
    alone, not by the modules every conversion imports."""
    import subprocess
    import sys

    code = ("import sys; import onnx_precision.cli, onnx_precision.convert.run, onnx_precision.oracle, "
            "onnx_precision.check; print('onnx.reference' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_one_shot_sessions_go_without_onnxruntimes_arena_and_the_twin_keeps_it():
    """The one-shot sessions (make_session's default: verification, FP32 runs) free their memory after
    each run rather than keep onnxruntime's arena at its largest run (11 MB of the dynamic-quant
    benchmark's peak); the search's probe sessions, run again and again, keep it, and so does the twin
    graph, whose thousands of short-lived tensors the system allocator held on to (Kokoro-82M int8:
    2375 MB without the arena, 1494 MB with it)."""
    from onnx_precision.oracle import Emulator, make_session

    ctx = ModelContext.of(named(L2))
    twin = Emulator(ctx).twin(None, X50)
    assert twin is not None and twin.session.get_session_options().enable_cpu_mem_arena
    assert not make_session(ctx.model, ctx.base_dir).get_session_options().enable_cpu_mem_arena
    assert EmulationSession(ctx).session.get_session_options().enable_cpu_mem_arena


def test_the_twin_graph_holds_no_copy_of_the_weights_beside_its_session(monkeypatch):
    """The twin's proto (its initializers a copy of the model's weights) is gone when onnxruntime
    parses it and while it runs; the twin a session keeps has its nodes and outputs, not its weights."""
    import gc

    from onnx_precision.oracle import Emulator, sessions

    model = mlp_with_large_weights()
    ctx = ModelContext.of(model)
    weighted: list[int] = []

    def twins_with_weights(*args, **kwargs):
        weighted.append(sum(1 for m in gc.get_objects() if isinstance(m, onnx.ModelProto)
                            and m is not model and any(t.name == "w1" for t in m.graph.initializer)))
        return real(*args, **kwargs)

    real = sessions.weighted_session
    monkeypatch.setattr(sessions, "weighted_session", twins_with_weights)
    twin = Emulator(ctx).twin(None, MLP_FEED)
    assert twin is not None and weighted == [0]
    assert not twin.twin.model.graph.initializer and twin.twin.model.graph.node
    plain = ort.InferenceSession(model.SerializeToString(), sessions.session_options())
    assert twin.run(MLP_FEED)["y"].tobytes() == plain.run(None, MLP_FEED)[0].tobytes()


def test_a_written_file_is_verified_with_its_weights_read_from_it_unchecked_again(tmp_path, monkeypatch):
    """The written file (checked before it was verified) is read back light: not checked again, its large
    inline weights reaching onnxruntime as maps of the file itself, never copied into a proto (the checks
    were 69 MB of a 26 MB model's verification peak). Its verdict is the emulation's of the model in
    memory."""
    from onnx_precision import context
    from onnx_precision.oracle import sessions, verify_output
    from onnx_precision.storage import save_model

    model = mlp_with_large_weights()
    written = rewrite(ModelContext.of(model), plan_of(model)).model
    path = str(tmp_path / "fp16.onnx")
    save_model(written, path)
    assert all(t.raw_data for t in onnx.load(path).graph.initializer)  # the weights are inline
    want = run_emulated(ModelContext.of(written), [MLP_FEED]).outputs
    handed: list[dict] = []

    def weighted(model, options, providers, values):
        handed.append(dict(values))
        return real(model, options, providers, values)

    real = sessions.weighted_session
    monkeypatch.setattr(sessions, "weighted_session", weighted)
    monkeypatch.setattr(context, "validate_model", lambda *a: pytest.fail("the written file checked again"))
    verified, _, _ = verify_output(path, [MLP_FEED], want, Tolerance())
    [values] = handed
    mapped = [v.base.filename for v in values.values() if isinstance(v.base, np.memmap)]
    assert mapped == [os.path.realpath(path)] * 2
    assert verified.passed and verified.worst().rel_rms_err == 0.0


def test_a_weight_of_64_kb_is_left_in_its_file_and_handed_by_reference(tmp_path):
    """A 256 x 256 int8 matrix (exactly storage.INLINE_EXTERNAL_BYTES) is a weight: a file read light
    leaves it in the file and onnxruntime is handed it by reference, not inside the serialized model
    (such tensors were 11 MB of the 26 MB dynamic-quant model of scripts/bench_quantized.py, parsed and
    serialized into every session)."""
    from onnx_precision.context import read_written
    from onnx_precision.oracle.weights import by_reference

    w = np.arange(65536).astype(np.int8).reshape(256, 256)
    node = onnx.helper.make_node("Cast", ["w"], ["y"], to=onnx.TensorProto.FLOAT, name="cast")
    graph = onnx.helper.make_graph([node], "g", [], [onnx.helper.make_tensor_value_info(
        "y", onnx.TensorProto.FLOAT, [256, 256])], [onnx.numpy_helper.from_array(w, "w")])
    path = str(tmp_path / "m.onnx")
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), path)
    model, base_dir = read_written(path)
    [tensor] = model.graph.initializer
    assert not tensor.raw_data and {e.key: e.value for e in tensor.external_data}["location"] == "m.onnx"
    light, values = by_reference(model, base_dir)
    assert list(values) == ["w"] and values["w"].tobytes() == w.tobytes()
    assert not light.graph.initializer[0].raw_data
