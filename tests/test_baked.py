"""Baked emulation graphs: one plan's Casts in place, no If, the same values as the switch graph."""

from __future__ import annotations

import functools
import json
import os
import weakref
from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision import policy
from onnx_precision.context import ModelContext, load_model
from onnx_precision.data import Samples, SampleSpec, load_samples
from onnx_precision.oracle import EmulationSession, Emulator
from onnx_precision.plan import PrecisionPlan
from onnx_precision.target import FP16, GENERIC, TensorRTTarget
from onnx_precision.trt.versions import TrtVersion

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ("if_branch", "layernorm_eps", "nafnet_boxfilter", "two_culprits", "deep_cnn")


def _plans(ctx: ModelContext, count: int):
    """All FP16, then ``count`` random mixes (fixed seed)."""
    plan = policy.resolve(ctx, ctx.all_low_plan())
    yield plan
    rng = np.random.default_rng(0)
    nodes = list(ctx.node_ops)
    for _ in range(count):
        pinned = [n for n in nodes if rng.random() < 0.4]
        yield policy.resolve(ctx, plan.with_fp32(pinned, plan.decisions[nodes[0]].reasons[0]))


@pytest.mark.slow  # 1.4 s in a full run on 2 busy cores
@pytest.mark.parametrize("target", ["generic", "tensorrt"])
@pytest.mark.parametrize("name", EXAMPLES)
def test_a_baked_plan_is_bit_identical_to_the_switch_graph_running_it(name, target):
    ctx = load_model(os.path.join(ROOT, "models", f"{name}.onnx"),
                     target=GENERIC if target == "generic" else TensorRTTarget(TrtVersion.parse("10.8")))
    samples = load_samples(ctx.model, SampleSpec(os.path.join(ROOT, "models", f"{name}.npz")))
    switched = EmulationSession(ctx, capture_intermediates=False)
    for plan in _plans(ctx, 3):
        written = policy.layer_norm_pins(ctx, plan)  # as the Emulator bakes a plan
        baked = EmulationSession(ctx, capture_intermediates=False,
                                 baked=dict.fromkeys((n for n in ctx.node_ops if written.is_fp16(n)), FP16))
        assert not any(n.op_type == "If" for n in baked.switch_model.model.graph.node
                       if n.name not in ctx.node_ops)  # no If of its own (the model's own Ifs stay)
        for feed in samples.feeds:
            want, got = switched.run(plan, feed), baked.run(plan, feed)
            for out in switched.outputs:
                np.testing.assert_array_equal(got[out], want[out])


def _external_chain(directory: str) -> str:
    """x -> MatMul(w0) -> MatMul(w1) -> y, the 256 KiB weights in a data file."""
    rng = np.random.default_rng(3)
    inits = []
    for i in range(2):
        w = numpy_helper.from_array((rng.standard_normal((256, 256)) / 16).astype(np.float32), f"w{i}")
        onnx.external_data_helper.set_external_data(w, "w.bin", offset=i * 256 * 256 * 4)
        with open(os.path.join(directory, "w.bin"), "ab") as f:
            f.write(w.raw_data)
        w.ClearField("raw_data")
        inits.append(w)
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="mm0"),
             helper.make_node("MatMul", ["h", "w1"], ["y"], name="mm1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(directory, "m.onnx")
    onnx.save(model, path)
    return path


def test_a_node_reading_an_external_weight_rounds_it_inside_an_if_when_it_runs(tmp_path):
    ctx = load_model(_external_chain(str(tmp_path)))
    plan = policy.resolve(ctx, ctx.all_low_plan())
    fp16 = frozenset(ctx.node_ops)
    baked = EmulationSession(ctx, capture_intermediates=False, baked=dict.fromkeys(fp16, FP16))
    graph = baked.switch_model.model.graph
    # Plain Casts of the weights would run first and hold every rounded weight at once.
    assert [n.op_type for n in graph.node if n.name in fp16] == ["If", "If"]
    assert not any(n.op_type == "Cast" and n.input[0] in ("w0", "w1") for n in graph.node)
    x = np.random.default_rng(4).standard_normal((1, 256)).astype(np.float32)
    switched = EmulationSession(ctx, capture_intermediates=False)
    np.testing.assert_array_equal(baked.run(plan, {"x": x})["y"], switched.run(plan, {"x": x})["y"])


def test_the_emulator_builds_a_session_per_plan_until_a_search_needs_the_switch_graph():
    ctx = load_model(os.path.join(ROOT, "models", "two_culprits.onnx"))
    feed = load_samples(ctx.model, SampleSpec(os.path.join(ROOT, "models", "two_culprits.npz"))).feeds[0]
    plan = policy.resolve(ctx, ctx.all_low_plan())
    emulator = Emulator(ctx)
    emulator.run(None, feed, intermediates=True)
    emulator.run(plan, feed)
    emulator.run(plan, feed)  # the same plan: no new session
    assert emulator.sessions_built == 2 and emulator.probes_run == 3
    fp32 = emulator.session(None, capture=True)
    assert emulator.session(None) is fp32  # a capturing session serves a run without capture
    emulator.run(plan.with_fp32(["a_norm"], plan.decisions["a_norm"].reasons[0]), feed)
    assert emulator.sessions_built == 3  # two are kept: the least recently used (all FP16) went
    assert emulator.session(None, capture=True) is fp32 and emulator.sessions_built == 3
    emulator.run(plan, feed)
    assert emulator.sessions_built == 4
    searching = emulator.searching()
    assert searching.switch_model.switch_input and emulator.sessions_built == 5
    assert emulator.session(plan) is searching and emulator.searching() is searching


@pytest.mark.slow  # 2.3 s of CPU: deep_cnn inspected whole, then in 7 chunks
def test_a_chunked_capture_gives_the_statistics_and_errors_of_a_whole_one(monkeypatch):
    from onnx_precision.oracle import emulator as emulator_module
    from onnx_precision.oracle import inspect_plan, inspection

    ctx, samples, (plan, _, _) = _inspected("deep_cnn")
    whole_ref, whole_layer = _captured("deep_cnn")[0]
    monkeypatch.setattr(inspection, "FIRST_CHUNK", 3)
    # 4 MiB of deep_cnn's 25 MiB of intermediates per run: 7 chunks, each a session of its own for
    # FP32 and one for the plan (1 MiB made 26 chunks, 52 sessions, 5.4 s of CPU for the same checks)
    monkeypatch.setattr(emulator_module, "MIN_CAPTURE_BYTES", 4 << 20)
    emulator = Emulator(ctx)
    chunks = emulator.chunks(samples.feeds[0])
    monkeypatch.setattr(emulator, "chunks", lambda feed: chunks)
    monkeypatch.setattr(emulator, "twin", lambda plan, feed: None)  # as for an opset-10 model
    ref, layer = inspect_plan(emulator, plan, samples)
    assert chunks.count == 7 and chunks.budget == 4 << 20  # the weights are under 16 MiB
    assert ref.stats == whole_ref.stats and ref.first_nonfinite == whole_ref.first_nonfinite
    assert layer.nodes == whole_layer.nodes and layer.first_divergence == whole_layer.first_divergence
    for got, want in zip(layer.outputs + ref.outputs, whole_layer.outputs + whole_ref.outputs):
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)


def _same_inspection(got, want) -> None:
    (ref, layer), (want_ref, want_layer) = got, want
    assert ref.stats == want_ref.stats and list(ref.stats) == list(want_ref.stats)
    assert ref.first_nonfinite == want_ref.first_nonfinite
    assert layer.nodes == want_layer.nodes and layer.first_divergence == want_layer.first_divergence
    for ours, theirs in zip(layer.outputs + ref.outputs, want_layer.outputs + want_ref.outputs):
        assert ours.keys() == theirs.keys()
        assert all(np.array_equal(ours[k], theirs[k], equal_nan=True) for k in ours)


def _inspected(name: str) -> tuple[ModelContext, Samples, tuple[PrecisionPlan, ...]]:
    """An example's context, samples and three plans: all FP16, a random mix, all FP16 with FP16 I/O."""
    ctx = load_model(os.path.join(ROOT, "models", f"{name}.onnx"))
    samples = load_samples(ctx.model, SampleSpec(os.path.join(ROOT, "models", f"{name}.npz")))
    all_fp16, mixed = _plans(ctx, 1)
    fp16_io = policy.resolve(ctx, replace(all_fp16, fp16_io=True, resolved=False))
    return ctx, samples, (all_fp16, mixed, fp16_io)


@functools.cache
def _captured(name: str) -> list:
    """inspect_plan of each of :func:`_inspected`'s plans on one switch graph capturing every tensor:
    what a twin graph must see, whatever its budget (deep_cnn: 0.5 s of CPU a switch graph)."""
    from onnx_precision.oracle import inspect_plan

    ctx, samples, plans = _inspected(name)
    switch = EmulationSession(ctx)
    return [inspect_plan(switch, plan, samples) for plan in plans]


@pytest.mark.parametrize("budget", [0, 1 << 30])  # every tensor summarised in the graph / fetched whole
# deep_cnn is slow: 3.2 s of CPU with every tensor summarised (its switch graph's captures included, 1 s),
# 1 s fetched whole (its 106 nodes' twin graph takes onnxruntime 0.6-0.9 s to build)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "deep_cnn" else n
                                  for n in EXAMPLES + ("log_underflow", "fp32_nan", "softmax_nomax")])
def test_the_twin_graph_sees_what_capturing_every_tensor_sees(name, budget, monkeypatch):
    from onnx_precision.oracle import inspect_plan

    ctx, samples, plans = _inspected(name)
    for plan, captured in zip(plans, _captured(name)):
        emulator = Emulator(ctx)
        emulator.__dict__["_budget"] = budget
        twins: list = []  # the twin graphs the inspection builds

        def twin(plan, feed=None, built=emulator.twin, twins=twins):
            twins.append(built(plan, feed))
            return twins[-1]
        monkeypatch.setattr(emulator, "twin", twin)
        _same_inspection(inspect_plan(emulator, plan, samples), captured)
        assert emulator.sessions_built == 1 and len(twins) == 1  # one twin per inspection, no baked session
        assert twins[0] is not None
        exposed = [o.name for o in twins[0].twin.model.graph.output]
        assert len(exposed) == len(set(exposed))
        fetched_whole = set(twins[0].twin.whole) - set(twins[0].twin.outputs)  # graph outputs always are
        assert bool(fetched_whole) == bool(budget) and bool(twins[0].twin.summaries) != bool(budget)


@pytest.mark.slow  # 1.2 s in a full run on 2 busy cores
def test_the_twin_graph_compares_each_tensor_right_after_the_node_that_makes_it():
    ctx = load_model(os.path.join(ROOT, "models", "deep_cnn.onnx"))
    emulator = Emulator(ctx)
    emulator.__dict__["_budget"] = 0
    twin = emulator.twin(policy.resolve(ctx, ctx.all_low_plan()))
    assert twin is not None
    nodes = list(twin.twin.model.graph.node)
    position = {o: k for k, n in enumerate(nodes) for o in n.output}
    originals = [n for n in ctx.model.graph.node if n.output[0] in twin.twin.summaries]
    assert len(originals) > 10
    for node, following in zip(originals, originals[1:]):
        floats, ints = twin.twin.summaries[node.output[0]]
        # the FP32 tensor is compared before the next original node runs: it can die there
        assert position[node.output[0]] < position[floats] < position[following.output[0]]
        assert position[ints] < position[following.output[0]]


def test_a_twin_graph_passes_graph_inputs_through_to_outputs_with_fp16_io():
    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("x", "y"))
    graph = helper.make_graph([helper.make_node("Exp", ["x"], ["y"], name="exp")], "g", [x], [y, x])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ctx = ModelContext.of(model)
    plan = policy.resolve(ctx, replace(ctx.all_low_plan(), fp16_io=True, resolved=False))
    feed = {"x": np.array([0.1, 1.0, 11.5, 12.0], np.float32)}
    emulator = Emulator(ctx)
    twin = emulator.twin(plan, feed)
    assert twin is not None
    exposed = [o.name for o in twin.twin.model.graph.output]
    assert sorted(exposed) == sorted(["y", "x", *twin.twin.plan_outputs.values()])  # outputs are whole
    values = twin.run(feed)
    fp16 = feed["x"].astype(np.float16)
    assert np.array_equal(values[twin.twin.plan_outputs["x"]], fp16.astype(np.float32))
    with np.errstate(over="ignore"):
        want = np.exp(fp16.astype(np.float32)).astype(np.float16).astype(np.float32)
    assert np.array_equal(values[twin.twin.plan_outputs["y"]], want)
    assert np.isinf(values[twin.twin.plan_outputs["y"]][-1])  # e^12 > 65504: the FP16 output overflows


SUMMARISED = {
    "finite": [1.0, -2.5, 0.0, 3e-8, -7e4, 0.5],
    "all zero": [0.0] * 6,
    "nothing flushes": [1.0, -2.0, 0.0, 3.0],
    "tiny only": [1e-8, -2e-9, 0.0, 5e-8, 1e-7, 0.0],
    "fp32 nan and inf": [1.0, np.nan, -np.inf, 2e-8, 0.0, 3.0],
    "plan overflows": [1.0, 7e4, -7e4, 0.25, 0.0, 1e-3],
    "empty": [],
}


@pytest.mark.parametrize("case", SUMMARISED)
def test_a_summary_computed_in_the_graph_equals_numpys(case):
    from onnx_precision.oracle.inspection import _summarised
    from onnx_precision.oracle.layerwise_error import tensor_error
    from onnx_precision.oracle.ranges import tensor_stats
    from onnx_precision.oracle.rounding import Names
    from onnx_precision.oracle.twin import _Constants, summary_nodes

    ref = (np.array(SUMMARISED[case], np.float32).reshape(-1, 1) if SUMMARISED[case]
           else np.zeros((0, 3), np.float32))
    with np.errstate(over="ignore"):
        plan = ref.astype(np.float16).astype(np.float32)
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("r", "c")]
    model = helper.make_model(helper.make_graph([], "g", vis, []),
                              opset_imports=[helper.make_opsetid("", 17)])
    names = Names(model)
    consts = _Constants(model, names)
    for with_plan in (False, True):
        nodes, (floats, ints) = summary_nodes("r", "c" if with_plan else None, names, consts, FP16.flush)
        graph = helper.make_graph(nodes, "g", vis,
                                  [helper.make_tensor_value_info(floats, TensorProto.FLOAT, None),
                                   helper.make_tensor_value_info(ints, TensorProto.INT32, None)],
                                  list(model.graph.initializer))
        summary = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        session = ort.InferenceSession(summary.SerializeToString(), providers=["CPUExecutionProvider"])
        stats, error = _summarised(*session.run(None, {"r": ref, "c": plan}))
        assert stats == tensor_stats(ref)
        assert error == (tensor_error(ref, plan) if with_plan else None)


def test_a_plan_probes_session_goes_when_the_next_plan_is_probed():
    # two sessions of a model hold its weights twice: the caller's plan is not measured again once
    # the base plan is, and a capturing session (the layerwise runs alternate two) stays
    ctx = load_model(os.path.join(ROOT, "models", "two_culprits.onnx"))
    feed = load_samples(ctx.model, SampleSpec(os.path.join(ROOT, "models", "two_culprits.npz"))).feeds[0]
    plan = policy.resolve(ctx, ctx.all_low_plan())
    emulator = Emulator(ctx)
    fp32 = emulator.session(None, capture=True)
    emulator.run(plan, feed)
    first = weakref.ref(emulator.session(plan))
    emulator.run(plan.with_fp32(["a_norm"], plan.decisions["a_norm"].reasons[0]), feed)
    assert first() is None and emulator.sessions_built == 3
    assert emulator.session(None, capture=True) is fp32


def test_the_twin_graph_runs_in_its_order_when_a_dequantize_linear_feeds_the_chain(tmp_path, monkeypatch):
    # onnxruntime gives each further reader of a DequantizeLinear's output (here the original Add
    # and the summary comparing it) its own copy of the DQ, appended to the graph: the priority
    # order then ran that copy, and the whole FP32 chain after it, once the plan's copy had run, so
    # every tensor waited for its comparison (Kokoro-82M int8: 4.4 GB instead of 1.3).
    from onnx_precision.oracle import emulator as emulator_module

    plain = emulator_module.twin_session_options

    def profiled(threads):
        options = plain(threads)
        options.enable_profiling = True
        options.profile_file_prefix = str(tmp_path / "twin")
        return options

    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["dq"], name="dq"),
             helper.make_node("Add", ["x", "dq"], ["a0"], name="a0")]
    nodes += [helper.make_node("Sin", [f"a{i}"], [f"a{i + 1}"], name=f"a{i + 1}") for i in range(6)]
    weights = [numpy_helper.from_array(np.arange(8, dtype=np.int8), "w"),
               numpy_helper.from_array(np.array(0.5, np.float32), "s"),
               numpy_helper.from_array(np.array(0, np.int8), "z")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("a6", TensorProto.FLOAT, [8])], weights)
    ctx = ModelContext.of(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))
    emulator = Emulator(ctx)
    emulator.__dict__["_budget"] = 0  # every tensor summarised in the graph
    monkeypatch.setattr(emulator_module, "twin_session_options", profiled)
    twin = emulator.twin(policy.resolve(ctx, ctx.all_low_plan()))
    assert twin is not None
    twin.run({"x": np.ones(8, np.float32)})
    with open(twin.session.end_profiling()) as f:
        ran = [e["name"].removesuffix("_kernel_time") for e in json.load(f)
               if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    graph_order = [n.name for n in twin.twin.model.graph.node]
    # in the graph's order: each tensor and its plan copy are compared, and can die, before the
    # next original node runs (the copy of the DQ ran after every plan node, the FP32 chain last)
    assert [name for name in ran if name in set(graph_order)] == graph_order
