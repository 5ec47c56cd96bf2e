"""A run's basis (issue 31 item 1): what it measured before it searched is one value, built once by one
function, which ``convert`` and ``check`` both build and judge by, and which checks what it ensures."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from test_quantized import qdq_mlp

from onnx_precision.basis import AsGiven, Basis, measure
from onnx_precision.check import check
from onnx_precision.convert import ConvertOptions, convert_model
from onnx_precision.data import Samples, SampleSpec
from onnx_precision.errors import InternalError
from onnx_precision.judge import Tolerance
from onnx_precision.quant_reference import BYPASSED, QuantGate
from onnx_precision.target import UNMEASURED, Measured, WebGpuTarget


def _summed(opset: int = 17) -> onnx.ModelProto:
    """A MatMul whose Σ|x·w| (~10) holds in FP16 with room, then a ReduceSum whose Σ|t| (~41 000) holds
    without a headroom of 2: on WebGPU, which sums both in FP16, one sum proven, one checked."""
    rng = np.random.default_rng(0)
    w = h.make_tensor("w", T.FLOAT, [64, 4096], rng.uniform(9, 11, (64, 4096)).astype(np.float32).ravel())
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["t"], name="small"),
                          h.make_node("ReduceSum", ["t"], ["y"], name="large", keepdims=1)], "summed",
                         [h.make_tensor_value_info("x", T.FLOAT, [1, 64])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 1])], [w])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def _same(a: Basis, b: Basis) -> None:
    """``a`` and ``b`` hold the same values: samples, references, tolerances and how they were derived,
    the sums measured and proven, the headroom."""
    assert len(a.samples.feeds) == len(b.samples.feeds)
    for fa, fb in zip(a.samples.feeds, b.samples.feeds):
        assert fa.keys() == fb.keys() and all(np.array_equal(fa[k], fb[k]) for k in fa)
    for ra, rb in zip(a.references, b.references, strict=True):
        assert ra.keys() == rb.keys() and all(np.array_equal(ra[k], rb[k]) for k in ra)
    assert a.tolerances == b.tolerances and a.tolerance == b.tolerance and a.given == b.given
    assert type(a.reference) is type(b.reference)
    assert a.notes(None) == b.notes(None) and a.to_json(None) == b.to_json(None) and a.relative == b.relative
    assert (a.headroom, dict(a.sums.bounds), a.measured) == (b.headroom, dict(b.sums.bounds), b.measured)


def test_check_builds_the_basis_convert_built_and_judges_the_written_model_as_its_verification(tmp_path):
    model, feeds = _summed(), [{"x": np.full((1, 64), 1 / 64, np.float32)}]
    converted = convert_model(model, feeds, ConvertOptions(mode="static", target=WebGpuTarget()))
    written = converted.auto.basis
    # the MatMul's sum is proven in range on the sample, the ReduceSum's is not
    assert written.measured == Measured(frozenset({"small"}))
    assert written.sums.bounds.keys() == {"small", "large"}
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "m16.onnx")
    onnx.save(model, path)
    converted.save(out)
    np.savez(tmp_path / "x.npz", **feeds[0])
    checked = check(path, out, SampleSpec(str(tmp_path / "x.npz")), target=WebGpuTarget())
    _same(checked.basis, written)
    assert isinstance(checked.basis.reference, AsGiven)
    verified = converted.report.verified
    assert [m.rel_rms_err for m in checked.comparison.outputs] == [m.rel_rms_err for m in verified.outputs]
    assert checked.passed == verified.passed


def test_a_quantized_models_basis_is_its_gate_in_check_as_in_convert(tmp_path):
    model = qdq_mlp(19)
    feeds = [{"x": np.random.default_rng(1).uniform(-1, 1, (4, 32)).astype(np.float32)}]
    converted = convert_model(model, feeds, ConvertOptions(mode="static"))
    path, out = str(tmp_path / "q.onnx"), str(tmp_path / "q16.onnx")
    onnx.save(model, path)
    converted.save(out)
    np.savez(tmp_path / "x.npz", **feeds[0])
    checked = check(path, out, SampleSpec(str(tmp_path / "x.npz")))
    _same(checked.basis, converted.auto.basis)
    gate = checked.basis.reference
    assert isinstance(gate, QuantGate) and gate.source == BYPASSED
    # each sample judged by its own bound, relative to its quantization error; the one stated is the loosest
    assert checked.basis.tolerances == gate.tolerances
    assert checked.tolerance.for_output("y").error_stat == "rms"
    verified = converted.report.verified
    assert [m.rel_rms_err for m in checked.comparison.outputs] == [m.rel_rms_err for m in verified.outputs]
    assert checked.quant_notes == gate.notes(checked.comparison)


def test_held_out_samples_are_judged_alike_with_every_sum_checked():
    from onnx_precision.context import ModelContext

    ctx = ModelContext.of(_summed())
    ctx = ModelContext(ctx.model, ctx.path, ctx.base_dir, ctx.renamed, target=WebGpuTarget())
    samples = Samples(({"x": np.full((1, 64), 1 / 64, np.float32)},), False, "test")
    basis = measure(ctx, samples, headroom=2.0)
    assert basis.measured.proven == {"small"}
    held = Samples(({"x": np.full((1, 64), 1 / 32, np.float32)},), False, "held out")
    judged = basis.held_out(ctx, held)
    # a proof holds on the samples that made it: none carries over, the judging does
    assert judged.measured == UNMEASURED and judged.samples is held and judged.given == basis.given
    assert not np.array_equal(judged.references[0]["y"], basis.references[0]["y"])


def test_a_basis_refuses_references_that_are_not_one_per_sample():
    samples = Samples(({"x": np.zeros(2, np.float32)}, {"x": np.ones(2, np.float32)}), False, "two")
    with pytest.raises(InternalError, match="a basis of 2 sample"):
        Basis(samples, AsGiven(Tolerance(), ({"y": np.zeros(2, np.float32)},)))
