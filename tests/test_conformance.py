"""Conformance: every ONNX backend node case in the selection converts to a valid, running, matching FP16
model.

The selection (tests/conformance_harness.py) is every deterministic node case with float32 tensors
that onnxruntime (CPU) runs and matches the suite's expected outputs in FP32. The selection is made
at collection (it runs each case once in onnxruntime, in FP32, and keeps the outputs for the tests):
cases outside it are not tests, the run's summary counts them by reason (conftest.py) and
test_the_cases_left_out_cannot_apply checks those reasons. A selected case must, after ``--mode
all-fp16``: pass the full checker (when the FP32 model does), load and run in onnxruntime, and match
the FP32 outputs within an FP16 tolerance (float outputs) or exactly (others). There are no
exclusions: all selected cases pass.
Figures (and onnxconverter-common's on the same selection): ``python scripts/conformance.py``.

Control-flow and sequence cases are also converted with random mixed plans (half the nodes FP32).
Also the light models shipped with onnx (DenseNet-121, Inception, ShuffleNet, ...) convert, pass the
checker and run, their outputs close to FP32 on a random input: all but those whose every op another
of them has (COVERED).
"""

from __future__ import annotations

import os

import conformance_harness as h
import numpy as np
import onnx
import pytest
from conftest import battery

# A selected case that may fail, with the reason. Empty: every selected case passes.
EXCLUDED: dict[str, str] = {}
SELECTED = sorted(n for n in h.node_cases() if h.selection(n) is None)


def test_the_cases_left_out_cannot_apply():
    """Every case left out has a reason that rules a conversion test out. Were onnxruntime to fail on
    every case, all would be left out as 'cannot run it', and silently: the floor catches that
    (1267 of 1884 cases are selected with onnx 1.23 and onnxruntime 1.32)."""
    left_out = h.left_out(h.node_cases())
    assert set(left_out) <= {"not deterministic", "no float32 tensor", "onnxruntime cannot run it in FP32",
                             "onnxruntime FP32 output differs from the expected output"}, left_out
    assert len(SELECTED) + sum(left_out.values()) == len(h.node_cases())
    assert len(SELECTED) >= 1200, h.selection_summary()


@pytest.mark.parametrize("name", battery(SELECTED))
def test_node_case_converts(name):
    if name in EXCLUDED:
        pytest.xfail(EXCLUDED[name])
    problem = h.check_conversion(h.node_cases()[name], h.all_fp16)
    assert problem is None, problem


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", battery([n for n in SELECTED
                                          if h.has_control_flow_or_sequences(h.node_cases()[n].model)]))
def test_control_flow_and_sequence_cases_with_mixed_plans(name, seed):
    """Half the nodes pinned FP32 at random: Casts across If/Loop/Scan bodies, outer-scope values
    and sequence values (which cannot be Cast) must still give a valid, matching model."""
    problem = h.check_conversion(h.node_cases()[name], h.mixed_plan_converter(seed))
    assert problem is None, problem


def _tensor_cases_sample() -> list[str]:
    """Every 8th selected case whose feeds are all tensors (the oracle's switch graph takes those)."""
    names = [n for n in SELECTED if all(isinstance(v, np.ndarray) for v in h.node_cases()[n].feeds.values())]
    return names[::8]


@pytest.mark.parametrize("name", battery(_tensor_cases_sample()))
def test_written_model_is_what_the_oracle_emulates(name):
    """The central contract: emulating a plan on the FP32 model (oracle.EmulationSession) and
    emulating the model the rewriter writes for it (oracle.run_emulated) give identical bits."""
    from onnx_precision import oracle
    case = h.node_cases()[name]
    plan = h.mixed_plan(case.model, seed=3)
    ctx = h.ModelContext.of(case.model)
    planned = oracle.EmulationSession(ctx, capture_intermediates=False).run(plan, case.feeds)
    written = h.rewriter.rewrite(ctx, plan).model
    emulated = oracle.run_emulated(h.ModelContext.of(written), [case.feeds]).outputs[0]
    for output, value in planned.items():
        np.testing.assert_array_equal(emulated[output], value, err_msg=output)


@pytest.mark.parametrize("name", battery(_tensor_cases_sample()))
def test_converting_the_output_again_changes_nothing(name):
    """Idempotence on an already-mixed model: the same decisions (the new Casts FP16) give the same bytes."""
    case = h.node_cases()[name]
    plan = h.mixed_plan(case.model, seed=5)
    once = h.rewriter.rewrite(h.ModelContext.of(case.model), plan).model
    names = [r.name for r in h.graph.walk_nodes(once.graph)]
    again_plan = h.uniform_plan(names, h.Precision.FP16, h.Reason("default", "all-fp16")).with_fp32(
        plan.fp32_nodes)
    again = h.rewriter.rewrite(h.ModelContext.of(once), again_plan).model
    assert again.SerializeToString(deterministic=True) == once.SerializeToString(deterministic=True)


# Light models whose every op another runs here, at a fraction of the cost (onnxruntime's FP32 and FP16
# runs at 224x224 are the cost, the conversion 0.02-0.08 s: VGG-19 3.6 s of CPU, ZFNet-512 2.0, AlexNet
# 1.3, ResNet-50 1.1; Inception-v1 and ShuffleNet 0.3 each): none has an op its cover does not convert.
# scripts/conformance.py converts and runs all of them.
COVERED = {"light_vgg19.onnx": "light_inception_v1.onnx", "light_zfnet512.onnx": "light_inception_v1.onnx",
           "light_bvlc_alexnet.onnx": "light_inception_v1.onnx",
           "light_resnet50.onnx": "light_shufflenet.onnx"}


def _ops(path: str) -> set[str]:
    return {n.op_type for n in onnx.load(path, load_external_data=False).graph.node}


def test_every_light_model_runs_or_has_no_op_that_one_run_lacks():
    by_name = {os.path.basename(p): p for p in h.light_models()}
    assert set(COVERED) | set(COVERED.values()) <= set(by_name) and not set(COVERED.values()) & set(COVERED)
    for name, cover in COVERED.items():
        assert _ops(by_name[name]) <= _ops(by_name[cover]), name


@pytest.mark.slow  # real networks: 3 s together, DenseNet-121 1.3 s
@pytest.mark.parametrize("path", [p for p in h.light_models() if os.path.basename(p) not in COVERED],
                         ids=os.path.basename)
def test_light_model_converts_and_runs(path):
    case = h.light_case(path)
    converted = h.all_fp16(case.model)
    onnx.checker.check_model(converted, full_check=True)
    reference = h.run_model(case.model, case.feeds)
    got = h.run_model(converted, case.feeds)
    fp16_nodes = sum(1 for n in converted.graph.node if n.op_type != "Cast")
    assert fp16_nodes == len(case.model.graph.node)  # no node added but Casts
    for ref, out in zip(reference, got):
        assert out.dtype == ref.dtype and out.shape == ref.shape
        assert np.isfinite(out).all()
        ref64, out64 = ref.astype(np.float64).ravel(), out.astype(np.float64).ravel()
        cosine = ref64 @ out64 / (np.linalg.norm(ref64) * np.linalg.norm(out64) or 1.0)
        assert cosine > 0.999, f"cosine {cosine:.5f}"
