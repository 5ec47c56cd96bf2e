"""The example models: committed files match their builders, and each sample shows its problem."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from conftest import unfused

import models
from models import generate as build
from onnx_precision import oracle
from onnx_precision.context import ModelContext, load_model
from onnx_precision.data import SampleSpec, load_samples
from onnx_precision.graph import walk_nodes
from onnx_precision.judge import Tolerance, compare_samples
from onnx_precision.plan import Precision, Reason, uniform_plan

BROKEN_IN_FP16 = ["l2_normalize", "nafnet_boxfilter", "layernorm_eps", "softmax_nomax", "log_underflow",
                  "two_culprits", "if_branch", "dynamic_batch"]
# Broken node by node: from opset 17 its LayerNorm is written as one LayerNormalization, statistics FP32.
NODE_BY_NODE = ("layernorm_eps",)


def test_committed_files_are_what_the_builders_make():
    assert build.stale() == []


def test_rebuild_is_byte_identical(tmp_path):
    build.write_all(str(tmp_path))
    first = {p: open(os.path.join(tmp_path, p), "rb").read() for p in _files(str(tmp_path))}
    build.write_all(str(tmp_path))
    assert first == {p: open(os.path.join(tmp_path, p), "rb").read() for p in _files(str(tmp_path))}
    assert "l2_normalize.onnx" in first and "l2_normalize.npz" in first
    assert os.path.join("dynamic_batch", "sample_1.npz") in first


def _files(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


@pytest.mark.parametrize("name", sorted(models.BUILDERS))
def test_example_is_small_valid_and_loads_with_its_data(name):
    path = build.model_path(name)
    assert os.path.getsize(path) < 1_000_000
    model = onnx.load(path)
    onnx.checker.check_model(model)
    assert model.ir_version == 8 and model.opset_import[0].version == 17
    samples = load_samples(load_model(path).model, SampleSpec(inputs=build.data_path(name)))
    assert len(samples.feeds) == len(models.BUILDERS[name]().feeds)


def _all_fp16(model: onnx.ModelProto):
    names = [ref.name for ref in walk_nodes(model.graph)]
    return uniform_plan(names, Precision.FP16, Reason("default", "test"))


def _broken(name: str) -> tuple[onnx.ModelProto, tuple]:
    """The example, as its FP16 problem shows: node by node (at opset 16) for NODE_BY_NODE."""
    example = models.BUILDERS[name]()
    return unfused(example.model) if name in NODE_BY_NODE else example.model, example.feeds


@pytest.mark.parametrize("name", BROKEN_IN_FP16)
def test_fp32_is_finite_and_emulated_fp16_breaks(name):
    model, feeds = _broken(name)
    session = oracle.EmulationSession(ModelContext.of(model))
    worst = 0.0
    for feed in feeds:
        ref = session.run(None, feed)
        emu = session.run(_all_fp16(model), feed)
        for out, value in ref.items():
            assert np.isfinite(value).all(), f"{name}: FP32 output {out} is not finite"
            err = np.abs(emu[out].astype(np.float64) - value)
            worst = max(worst, float(np.nanmax(err)) if np.isfinite(emu[out]).all() else np.inf)
    assert worst > 0.1, f"{name}: all-FP16 error {worst} is too small to show the problem"


@pytest.mark.parametrize("name", BROKEN_IN_FP16)
def test_default_verdict_fails_every_example_that_breaks(name):
    model, feeds = _broken(name)
    session = oracle.EmulationSession(ModelContext.of(model), capture_intermediates=False)
    plan = _all_fp16(model)
    refs = [session.run(None, feed) for feed in feeds]
    cands = [session.run(plan, feed) for feed in feeds]
    assert not compare_samples(refs, cands, Tolerance(), "emulate").passed
    assert compare_samples(refs, refs, Tolerance(), "emulate").passed


def test_benign_mlp_survives_fp16():
    example = models.benign_mlp()
    session = oracle.EmulationSession(ModelContext.of(example.model))
    feed = example.feeds[0]
    ref, emu = session.run(None, feed)["y"], session.run(_all_fp16(example.model), feed)["y"]
    assert np.abs(emu - ref).max() < 1e-3


def test_fp32_nan_model_is_nan_in_fp32():
    example = models.fp32_nan()
    y = oracle.EmulationSession(ModelContext.of(example.model)).run(None, example.feeds[0])["y"]
    assert np.isnan(y).any()


def test_dynamic_batch_has_two_batch_sizes_and_only_the_second_overflows():
    small, large = models.dynamic_batch().feeds
    assert small["x"].shape[0] != large["x"].shape[0]
    assert (small["x"] ** 2).sum(axis=1).max() < 65504 < (large["x"] ** 2).sum(axis=1).max()


@pytest.mark.slow  # 1.3 s in a full run on 2 busy cores
def test_transformer_is_large_and_only_its_outlier_layers_break():
    """Node by node (below opset 17); from 17 its LayerNorms are written as LayerNormalizations, whose
    FP32 statistics hold the outliers: then nothing breaks."""
    broken = models.transformer()
    assert len(broken.model.graph.node) >= 500
    clean = models.transformer(outlier_layers=())
    for model, feed, bad in ((unfused(broken.model), broken.feeds[0], True),
                             (unfused(clean.model), clean.feeds[0], False),
                             (broken.model, broken.feeds[0], False)):
        # one session per plan (what the search probes first): half the CPU of a switch graph of
        # 500 Ifs, the same bits (tests/test_baked.py)
        emulator = oracle.Emulator(ModelContext.of(model))
        err = np.abs(emulator.run(_all_fp16(model), feed)["y"] - emulator.run(None, feed)["y"]).max()
        assert (err > 0.5) == bad, err
