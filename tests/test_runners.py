"""The search runs on any PlanRunner: a fake one here, onnx.reference on a tiny model, the emulation by
default."""

from __future__ import annotations

import json

import numpy as np
import onnx
from conftest import parse

import models
from models import generate
from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.convert import choose as auto
from onnx_precision.data import Samples
from onnx_precision.options import Judging
from onnx_precision.oracle import Emulator, reference_runner
from onnx_precision.plan import PrecisionPlan

CHAIN = parse("""
<ir_version: 8, opset_import: ["" : 17]>
chain (float[8] x) => (float[8] y) {
    two = Constant <value = float {2.0}> ()
    h1 = Mul (x, two)
    h2 = Mul (h1, two)
    y = Add (h2, two)
}
""")


class FakeTarget:
    """A runner whose outputs are right only where ``culprit`` stays FP32: a target on which one node
    breaks in FP16 although the emulation finds nothing wrong with it. It cannot see inside."""

    oracle = "fake"
    inspection = None

    def __init__(self, ctx: ModelContext, culprit: str) -> None:
        self.emulator = Emulator(ctx)
        self.culprit = culprit
        self.outputs = self.emulator.outputs
        self.switchable = self.emulator.switchable
        self.sessions_built = 0
        self.probes_run = 0
        self.plans: list[PrecisionPlan | None] = []

    def run(self, plan: PrecisionPlan | None, feed):
        self.probes_run += 1
        self.plans.append(plan)
        values = self.emulator.run(None, feed)
        if plan is not None and plan.is_fp16(self.culprit):
            return {name: np.zeros_like(v) for name, v in values.items()}
        return values

    def searching(self) -> FakeTarget:
        return self


def test_the_search_probes_the_runner_it_is_given_and_finds_its_culprit():
    ctx = ModelContext.of(CHAIN)
    h2 = next(n for n, op in ctx.node_ops.items() if op == "Mul" and n.endswith("h2"))
    feeds = [{"x": np.linspace(-1, 1, 8, dtype=np.float32)}]
    fake = FakeTarget(ctx, h2)
    result = auto.choose_plan(ctx, ctx.all_low_plan(), Samples(feeds, False, "test"), Judging(),
                              runner=fake)
    assert result.passed and result.plan.fp32_nodes == (h2,)
    assert result.plan.decisions[h2].reasons[-1].source == "search"
    # every comparison the report shows is the runner's, and every probe went through it
    assert result.before.oracle == result.after.oracle == "fake" and not result.before.passed
    # before, the search's probes (its first, the start, is the "before" run); "after" is the search's last
    # probe, which passed with the chosen plan's precisions (the prober keeps its comparison)
    assert len(fake.plans) == fake.probes_run == 1 + (result.search.probes_run - 1)
    # the emulation alone passes all FP16: the pin is the fake target's doing
    plain = auto.choose_plan(ctx, ctx.all_low_plan(), Samples(feeds, False, "test"), Judging())
    assert plain.passed and plain.plan.fp32_nodes == ()


def test_a_runner_without_inspection_gets_the_ranges_from_the_emulation():
    example = models.build("l2_normalize")
    ctx = ModelContext.of(example.model)
    fake = FakeTarget(ctx, "sumsq")
    result = auto.choose_plan(ctx, ctx.all_low_plan(), Samples(example.feeds, False, "l2"), Judging(),
                              runner=fake)
    # the overflowing sum of squares (1.2e5) is found by the emulation's ranges and pinned before any probe
    assert result.node_stats["sumsq"].max_abs > 65504
    assert result.passed and "sumsq" in result.plan.fp32_nodes


def test_the_reference_runner_runs_the_written_plan_in_onnx_reference():
    example = models.build("l2_normalize")
    ctx = ModelContext.of(example.model)
    runner = reference_runner(ctx)
    feed = example.feeds[0]
    fp32 = runner.run(None, feed)["y"]
    fp16 = runner.run(ctx.all_low_plan(), feed)["y"]
    assert fp32.dtype == np.float32 and np.isfinite(fp32).all()
    assert not np.any(fp16)  # x / inf: the FP16 sum of squares overflowed (graph I/O stays FP32)
    assert runner.sessions_built == 2 and runner.probes_run == 2
    runner.run(ctx.all_low_plan(), feed)
    assert runner.sessions_built == 3  # a new plan object, a new written model


def test_oracle_reference_drives_the_search_of_convert(tmp_path):
    out = tmp_path / "l2.onnx"
    name = "l2_normalize"
    assert main(["convert", generate.model_path(name), "-o", str(out), "--inputs", generate.data_path(name),
                 "-q", "--oracle", "reference"]) == 0
    report = json.loads((tmp_path / "l2.report.json").read_text())
    assert report["status"] == "passed"
    assert [p["node"] for p in report["pinned"]] == ["sumsq", "norm"]
    outputs = report["outputs"]
    assert [outputs[k]["oracle"] for k in ("before", "after", "verified", "native")] == \
        ["reference", "reference", "emulate", "reference"]
    assert not outputs["before"]["passed"] and outputs["after"]["passed"]


def _layer_norm(dtype: int, opset: int = 17):
    from onnx import helper

    scale = onnx.numpy_helper.from_array(np.ones(64, onnx.helper.tensor_dtype_to_np_dtype(dtype)), "s")
    bias = onnx.numpy_helper.from_array(np.zeros(64, onnx.helper.tensor_dtype_to_np_dtype(dtype)), "b")
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="ln", axis=-1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, [2, 64])],
                              [helper.make_tensor_value_info("y", dtype, [2, 64])], [scale, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _wide_rows() -> np.ndarray:
    """Rows whose RMS deviation (~100) is past sqrt(65504 / 64) = 32: their FP16 sum of squares overflows."""
    return (np.random.default_rng(0).standard_normal((2, 64)) * 100).astype(np.float32)


def test_the_reference_oracle_computes_layer_norm_statistics_in_stash_type():
    from onnx import TensorProto
    from onnx.reference import ReferenceEvaluator

    from onnx_precision.oracle import run_reference

    x = _wide_rows()
    fp16 = _layer_norm(TensorProto.FLOAT16)
    with np.errstate(all="ignore"):
        stock = ReferenceEvaluator(fp16).run(None, {"x": x.astype(np.float16)})[0]
    assert not np.isfinite(stock).all() or not np.any(stock)  # onnx.reference: variance in FP16, inf
    ours = run_reference(ModelContext.of(fp16), [{"x": x}]).outputs[0]["y"].astype(np.float64)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    assert np.abs(ours - want).max() < 5e-3  # FP16 rounding of the normalised values only


def test_oracle_reference_passes_a_layer_norm_whose_fp16_statistics_would_overflow(tmp_path):
    from onnx import TensorProto

    path, data = tmp_path / "ln.onnx", tmp_path / "ln.npz"
    onnx.save(_layer_norm(TensorProto.FLOAT), str(path))
    np.savez(data, x=_wide_rows())
    assert main(["convert", str(path), "-o", str(tmp_path / "o.onnx"), "--inputs", str(data), "-q",
                 "--oracle", "reference", "--headroom", "0"]) == 0
    report = json.loads((tmp_path / "o.report.json").read_text())
    assert report["pinned"] == [] and report["outputs"]["before"]["passed"]
    assert report["outputs"]["native"]["oracle"] == "reference" and report["outputs"]["native"]["passed"]
