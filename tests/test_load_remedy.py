"""A written model onnxruntime cannot load at its default options is answered with FP32 pins that load.

The GRU denoiser of issue 23 (opset 11, [1, 257, T] spectra) written FP16 crashed onnxruntime's CPU
NchwcTransformer at default options; onnxruntime 1.32 loads every variant of it tried, so the crash is
played by a child that crashes as that one did: while the Transpose reading the NCHWc-converted Conv
stack computes in FP16, unless NchwcTransformer is disabled. The remedy's own load of the written
model is real, as is the LayerNormFusion failure of the last tests.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from models.stacks import layer_norm_stack
from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.convert import written_check
from onnx_precision.convert.written_check import load_remedies
from onnx_precision.oracle import default_load
from onnx_precision.oracle.default_load import WORKAROUNDS, LoadFailure, default_load_problem, pin_candidates
from onnx_precision.rewriter import rewrite

F, H, T, C = 257, 32, 20, 4
NCHWC_OFF = WORKAROUNDS[0]  # InferenceSession(..., disabled_optimizers=['NchwcTransformer'])


def gru_denoiser() -> onnx.ModelProto:
    """Conv stack over the spectrum -> Transpose -> GRU -> Transpose -> MatMul/Sigmoid mask * input."""
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return nh.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [init("conv_w", C, 1, 3, 3), init("conv_b", C), init("conv2_w", C, C, 3, 3), init("conv2_b", C),
             init("W", 1, 3 * H, C * F), init("R", 1, 3 * H, H), init("B", 1, 6 * H), init("mask_w", H, F),
             init("mask_b", F), nh.from_array(np.array([T, 1, C * F], np.int64), "shape")]
    nodes = [
        h.make_node("Unsqueeze", ["x"], ["x4"], axes=[1], name="Unsqueeze_0"),
        h.make_node("Conv", ["x4", "conv_w", "conv_b"], ["c1"], pads=[1, 1, 1, 1], name="Conv_1"),
        h.make_node("Relu", ["c1"], ["r1"], name="Relu_2"),
        h.make_node("Conv", ["r1", "conv2_w", "conv2_b"], ["c2"], pads=[1, 1, 1, 1], name="Conv_3"),
        h.make_node("Relu", ["c2"], ["r2"], name="Relu_4"),
        h.make_node("Transpose", ["r2"], ["t"], perm=[3, 0, 1, 2], name="Transpose_5"),  # [T, 1, C, F]
        h.make_node("Reshape", ["t", "shape"], ["seq"], name="Reshape_6"),
        h.make_node("GRU", ["seq", "W", "R", "B"], ["g", "gh"], hidden_size=H, name="GRU_7"),
        h.make_node("Squeeze", ["g"], ["gs"], axes=[1], name="Squeeze_8"),
        h.make_node("Transpose", ["gs"], ["gt"], perm=[1, 0, 2], name="Transpose_9"),  # [1, T, H]
        h.make_node("MatMul", ["gt", "mask_w"], ["m0"], name="MatMul_10"),
        h.make_node("Add", ["m0", "mask_b"], ["m1"], name="Add_11"),
        h.make_node("Sigmoid", ["m1"], ["mask"], name="Sigmoid_12"),
        h.make_node("Transpose", ["mask"], ["mask_t"], perm=[0, 2, 1], name="Transpose_13"),  # [1, F, T]
        h.make_node("Mul", ["x", "mask_t"], ["y"], name="Mul_14"),
    ]
    graph = h.make_graph(nodes, "gru_denoiser", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, F, T])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, F, T])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 11)])
    model.ir_version = 7
    return model


# The child of default_load, as the crash made it: SIGSEGV at default options while a node named in
# argv[2] reads an FP16 tensor; the model comes as default_load hands it over (a path, or "-": stdin).
_CRASHING_CHILD = """
import os, signal, sys, onnx
path, names = sys.argv[1], set(sys.argv[2].split(","))
model = onnx.load_from_string(sys.stdin.buffer.read()) if path == "-" else onnx.load(path)
inferred = onnx.shape_inference.infer_shapes(model).graph
types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.value_info) + list(inferred.input)}
if any(n.name in names and types.get(n.input[0]) == onnx.TensorProto.FLOAT16 for n in model.graph.node):
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def _crash_while_fp16(monkeypatch, names: str) -> None:
    """Default loads crash while one of ``names`` (comma-separated) reads FP16; disabling
    NchwcTransformer loads; the other workarounds crash too."""
    def command(path, attempt, libraries):
        if attempt == NCHWC_OFF:
            return [sys.executable, "-c", "import sys; sys.stdin.buffer.read()"]
        crashing = names if attempt == default_load.DEFAULT else "*"
        return [sys.executable, "-c", _CRASHING_CHILD, path, crashing]

    monkeypatch.setattr(default_load, "_child_command", command)


def _reads_fp16(path: str, node: str) -> bool:
    model = onnx.load(path)
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.value_info) + list(inferred.input)}
    return types[next(n for n in model.graph.node if n.name == node).input[0]] == TensorProto.FLOAT16


@pytest.fixture
def denoiser(tmp_path) -> str:
    path = str(tmp_path / "denoiser.onnx")
    onnx.save(gru_denoiser(), path)
    return path


@pytest.mark.slow  # 0.6 s in a full run on 2 busy cores
def test_a_crash_of_the_default_load_is_avoided_by_fp32_pins_and_the_model_that_loads_is_written(
        tmp_path, denoiser, capsys, monkeypatch):
    _crash_while_fp16(monkeypatch, "Transpose_5")
    out = str(tmp_path / "o.onnx")
    assert main(["convert", denoiser, "-o", out]) == 0
    stdout = capsys.readouterr().out
    assert f"{denoiser} -> {out}: passed\n" in stdout
    assert "FP32 pins (1): Transpose_5 (load)" in stdout
    note = ("note: the FP16 model as first written does not load at onnxruntime's default options: "
            "onnxruntime crashes (SIGSEGV) loading it, in NchwcTransformer (disabling it loads the model); "
            "keeping Transpose_5 FP32 avoids it: the written model loads; NchwcTransformer rewrites only "
            "what onnxruntime runs on its CPU provider: the pins are for CPU loads, a GPU provider does not "
            "run it")
    assert note in stdout
    report = json.loads((tmp_path / "o.report.json").read_text())
    assert report["status"] == "passed" and note.removeprefix("note: ") in report["notes"]
    pinned = [(p["node"], [r["source"] for r in p["reasons"]]) for p in report["pinned"]]
    assert pinned == [("Transpose_5", ["load"])]
    assert report["outputs"]["verified"]["passed"]
    assert "load remedy" in [p["name"] for p in report["cost"]["phases"]]
    # the file written is the pinned one: its Transpose_5 reads FP32, the others FP16 ...
    assert not _reads_fp16(out, "Transpose_5") and _reads_fp16(out, "Transpose_9")
    monkeypatch.undo()
    assert default_load_problem(out) == ""  # ... and onnxruntime itself loads it at default options


@pytest.mark.slow  # 0.8 s in a full run on 2 busy cores
def test_pins_are_tried_fewest_first_and_a_failure_no_pins_fix_still_exits_3_with_the_workaround(
        tmp_path, denoiser, capsys, monkeypatch):
    ctx = ModelContext.of(gru_denoiser())
    failure = LoadFailure("onnxruntime crashes (SIGSEGV) loading it", NCHWC_OFF)
    # what NchwcTransformer may rewrite: the Conv stack and what reads it (not the GRU's Transposes)
    assert pin_candidates(ctx, ctx.all_low_plan().low_nodes, failure) == (
        ("Transpose_5",), ("Relu_2", "Relu_4"), ("Relu_2", "Relu_4", "Transpose_5"),
        ("Conv_1", "Relu_2", "Conv_3", "Relu_4", "Transpose_5"))
    _crash_while_fp16(monkeypatch, "MatMul_10")  # a kind NchwcTransformer does not rewrite: no pin avoids it
    monkeypatch.setattr(written_check, "MAX_LOADS", 4)  # its Conv patterns' sets, as before the widening
    out = str(tmp_path / "o.onnx")
    assert main(["convert", denoiser, "-o", out]) == 3
    stdout = capsys.readouterr().out
    assert (f"{denoiser} -> {out}: ort-load-failed (the written model passes, but with default session "
            f"options onnxruntime crashes (SIGSEGV) loading it; it loads with {NCHWC_OFF.label})") in stdout
    assert "FP32 pins: none" in stdout and "keeping" not in stdout
    assert _reads_fp16(out, "Transpose_5")  # the model first written is back in place


def test_a_gpu_target_is_told_the_failing_optimiser_is_cpu_only_and_keeps_its_plan(tmp_path, denoiser, capsys,
                                                                                    monkeypatch):
    _crash_while_fp16(monkeypatch, "Transpose_5")
    out = str(tmp_path / "o.onnx")
    assert main(["convert", denoiser, "-o", out, "--target", "tensorrt"]) == 0
    stderr = capsys.readouterr().err
    assert ("builds the model; onnxruntime is not the target, and NchwcTransformer rewrites only what "
            "onnxruntime runs on its CPU provider)\n") in stderr
    assert _reads_fp16(out, "Transpose_5")


def test_a_node_onnxruntimes_message_names_is_the_pin_and_the_model_with_it_loads():
    """Real onnxruntime: LayerNormFusion binds X (FP32) and Scale (FP16) of an unfused FP16 LayerNorm
    to one type and names the node it fused from; FP32 there, the model loads."""
    ctx = ModelContext.of(layer_norm_stack(2, 64, opset=17, ramp=True))

    def unfused(plan):
        return rewrite(ctx, plan, fuse_layer_norms=False)

    written = unfused(ctx.all_low_plan())
    problem = default_load_problem_of(written.model)
    failure = LoadFailure.of(problem)
    assert failure.sentence == problem and failure.optimizer == "LayerNormFusion"
    assert failure.named_nodes == ("b0_scale",) and not failure.cpu_only
    remedy = next(load_remedies(ctx, written, problem, unfused))
    assert remedy.pins == ("b0_scale",)
    assert remedy.result.plan.decisions["b0_scale"].reasons[-1].source == "load"
    assert default_load.default_load_outcome(remedy.result.model) == ""


def default_load_problem_of(model: onnx.ModelProto) -> str:
    return default_load.DefaultLoad(ModelContext.of(model)).problem()


@pytest.mark.slow  # 0.5 s in a full run on 2 busy cores
def test_a_model_read_light_gets_the_remedy_its_weights_handed_inline(tmp_path, denoiser, capsys,
                                                                     monkeypatch):
    """A model file read light (its weights left in the file, as every file from
    light_load.LIGHT_LOAD_BYTES is) gets the remedy too: each candidate reaches the child with its weights
    inline (the remedy was skipped for a model whose weights are in files)."""
    from onnx_precision.storage import light_load

    monkeypatch.setattr(light_load, "LIGHT_LOAD_BYTES", 1024)
    _crash_while_fp16(monkeypatch, "Transpose_5")
    out = str(tmp_path / "o.onnx")
    assert main(["convert", denoiser, "-o", out]) == 0
    stdout = capsys.readouterr().out
    assert f"{denoiser} -> {out}: passed\n" in stdout and "FP32 pins (1): Transpose_5 (load)" in stdout
    assert not _reads_fp16(out, "Transpose_5") and _reads_fp16(out, "Transpose_9")
    monkeypatch.undo()
    assert default_load_problem(out) == ""
