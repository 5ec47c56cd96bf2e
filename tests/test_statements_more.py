"""Every statement a run makes is true of the file it writes, and the commands it suggests work when
pasted (issue 23): the notes, the ``next:`` line, the thin-pass note and the 16-bit shares."""

from __future__ import annotations

import os
import re
import shlex

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from test_fallback_written import _cnn, _feed
from test_margins import REMEDY, noisy

from models.generate import npz_bytes
from models.stacks import layer_norm_stack
from onnx_precision import policy
from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.judge import Tolerance, compare_samples, thin_pass_note
from onnx_precision.rewriter import rewrite
from onnx_precision.target import TensorRTTarget
from onnx_precision.trt.versions import NEWEST


def _layer_norm_note(notes: tuple[str, ...]) -> str:
    return next(n for n in notes if "decomposed LayerNorm(s)" in n)


def test_the_layer_norm_note_says_where_the_target_computes_the_statistics():
    """TensorRT's strongly typed Normalization layer computes a 16-bit LayerNormalization's statistics in
    its input's type whatever stash_type says: the note said 'statistics in FP32, stash_type 1'."""
    generic = ModelContext.of(layer_norm_stack(2, 64, opset=17, ramp=True))
    note = _layer_norm_note(rewrite(generic, generic.all_low_plan()).notes)
    assert "(statistics in FP32, stash_type 1)" in note
    trt = ModelContext.of(layer_norm_stack(2, 64, opset=17, ramp=True))
    trt.target = TensorRTTarget()
    note = _layer_norm_note(rewrite(trt, trt.all_low_plan()).notes)
    assert note == ("2 decomposed LayerNorm(s) written as one LayerNormalization each, named after their "
                    "last Add (stash_type 1, which TensorRT 10.15 does not apply: it computes the statistics "
                    "of the 2 FP16 one(s) in FP16, their input's type), so that onnxruntime's "
                    "LayerNormFusion cannot bind mixed types")
    second = policy.decomposed_layer_norms(trt)[1].nodes
    note = _layer_norm_note(rewrite(trt, trt.all_low_plan().with_fp32(list(second))).notes)
    assert ("it computes the statistics of the 1 FP16 one(s) in FP16, their input's type; the 1 FP32 one(s) "
            "in FP32)") in note


def _convert_lines(tmp_path, model: onnx.ModelProto, feed: dict[str, np.ndarray], *flags: str,
                   capsys) -> tuple[int, list[str]]:
    path, data = str(tmp_path / "m.onnx"), str(tmp_path / "m.npz")
    onnx.save(model, path)
    with open(data, "wb") as f:
        f.write(npz_bytes(feed))
    code = main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--inputs", data, *flags])
    return code, capsys.readouterr().out.splitlines()


def _next(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("next: "))[len("next: "):]


def _pasted(command: str) -> int:
    """The exit code of the suggested command pasted into a shell (its comment left out by the shell)."""
    args = shlex.split(command, comments=True)
    assert args[:2] == ["onnx-precision", "check"]
    return main(args[1:])


def test_the_next_step_names_the_types_the_written_model_uses(tmp_path, capsys):
    """--fallback bf16 where no node went BF16 (the opset kept at 11): the model written is FP16 alone,
    and the next step said 'any FP16/BF16 runtime runs it'; it says where the plan was judged to hold."""
    code, lines = _convert_lines(tmp_path, _cnn(0.1, 11), _feed(1.0), "--fallback", "bf16", capsys=capsys)
    assert code == 0 and any(line.startswith("note: opset kept at 11: no node went BF16") for line in lines)
    assert _next(lines).endswith(f"as this run judged it; holds on: generic, tensorrt {NEWEST}, webgpu, "
                                 f"openvino-gpu, fp16-accumulate (emulated on the samples)")


def test_the_webgpu_next_step_is_a_check_that_runs_here(tmp_path, capsys):
    """onnxruntime's usual builds have no WebGPU provider: the suggested '--oracle webgpu' stopped with
    'onnxruntime has no WebGpuExecutionProvider here' when pasted."""
    assert "WebGpuExecutionProvider" not in ort.get_available_providers()
    code, lines = _convert_lines(tmp_path, _cnn(0.1, 17), _feed(1.0), "--target", "webgpu", capsys=capsys)
    assert code == 0
    command, comment = _next(lines).split("  # ")
    assert "--oracle" not in command and command.endswith("--target webgpu")
    assert comment == ("judges it again as this run did, WebGPU's FP16 sums emulated; the native run needs "
                       "onnxruntime built with WebGpuExecutionProvider (not this one; then add --oracle "
                       f"webgpu) or onnxruntime-web in a browser; holds on: generic, tensorrt {NEWEST}, "
                       "webgpu, openvino-gpu, fp16-accumulate (emulated on the samples)")
    assert _pasted(command) == 0


def test_a_reference_model_that_is_the_quantized_model_itself_is_said_to_be(tmp_path):
    """--reference-model naming the quantized model: every quantization error is 0, and the notes said
    the outputs were 'not reached by the quantizers' under a head stating a relative bound."""
    import json

    from test_quantized import qdq_mlp

    path = str(tmp_path / "mlp.onnx")
    onnx.save(qdq_mlp(19), path)
    assert main(["convert", path, "-o", str(tmp_path / "o.onnx"), "--reference-model", path, "-q"]) == 0
    notes = json.load(open(tmp_path / "o.report.json"))["notes"]
    assert not any("not reached by the quantizers" in n for n in notes)
    assert (f"quantized model: the 16-bit remainder is judged against {path}, which computes what the "
            f"quantized model computes in FP32 (quantization error 0 on every output and sample: it is the "
            f"quantized model itself), so by the tolerance as given, not by 1.3 x a quantization "
            f"error") in notes


def test_a_thin_pass_under_the_quantized_gate_names_its_relative_bound():
    """Under a quantized model's gate the bound is (1 + margin) x the quantization error: the note said
    'passes within 10% of a bound (rel RMS err 0.068 against 0.07059)', a bound the user never set."""
    ref, cand = noisy(0.068)
    one = compare_samples([{"y": ref}], [{"y": cand}], Tolerance(max_rel_rms=1.3 * 0.0543), "emulate")
    assert thin_pass_note([one], REMEDY, {"y": 0.3}) == (
        "output 'y' passes within 10% of the bound (1 + 0.3) x the quantization error 0.0543 = 0.07059 "
        "(rel RMS err 0.068), judged on 1 sample: other inputs may fail; " + REMEDY)
    assert thin_pass_note([one], REMEDY) == (
        "output 'y' passes within 10% of a bound (rel RMS err 0.068 against 0.07059), judged on 1 sample: "
        "other inputs may fail; " + REMEDY)


def _share(line: str) -> str:
    """'100.0%' of '...: FP16: 8/9 nodes (88.9%), 100.0% of estimated FLOPs'."""
    return re.findall(r"([\d.]+%) of estimated FLOPs", line)[0]


def test_convert_and_check_state_the_same_16_bit_share_of_the_written_file(tmp_path, capsys):
    """A decomposed LayerNorm is written as one LayerNormalization that reads and writes FP16: a 16-bit
    node of the written file (its FP32 statistics, stash_type 1, inside it). convert counted its epsilon
    Add FP32, as planned: 99.8% where check of the same file says 100.0%."""
    for name, share in (("layernorm_eps", "100.0%"), ("l2_normalize", "66.3%")):
        model, data, out = f"models/{name}.onnx", f"models/{name}.npz", str(tmp_path / f"{name}.onnx")
        assert main(["convert", model, "-o", out, "--inputs", data, "-q"]) == 0
        converted = capsys.readouterr().out.strip()
        assert main(["check", model, out, "--inputs", data, "-q"]) == 0
        checked = capsys.readouterr().out.strip()
        assert (_share(converted), _share(checked)) == (share, share), (converted, checked)


def test_a_node_that_reads_its_input_as_written_counts_where_it_computes(tmp_path, capsys):
    """ArgMax takes its float input as written (no Cast in front): planned FP16 on an FP32 graph input,
    it reads and computes FP32 in the written model. convert counted it FP16: 100.0% where check of
    the same file says 94.2%."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("ArgMax", ["x"], ["idx"], name="argmax", axis=1),
             helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
             helper.make_node("Relu", ["h"], ["z"], name="relu")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])
    outputs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8]),
               helper.make_tensor_value_info("idx", TensorProto.INT64, [4, 1])]
    graph = helper.make_graph(nodes, "argmax", [x], outputs, [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx")
    onnx.save(model, path)
    assert main(["convert", path, "-o", out, "-q"]) == 0
    converted = capsys.readouterr().out.strip()
    assert main(["check", path, out, "-q"]) == 0
    checked = capsys.readouterr().out.strip()
    assert (_share(converted), _share(checked)) == ("94.2%", "94.2%"), (converted, checked)


def test_a_pin_the_written_file_counts_with_a_16bit_node_says_so(tmp_path, capsys):
    # layernorm_eps: the plan pins the epsilon Add, which the written file computes inside its FP16
    # LayerNormalization: the counts say 0 FP32, so the pins line must not leave it as a bare FP32 node
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")
    out = str(tmp_path / "o.onnx")
    assert main(["convert", os.path.join(examples, "layernorm_eps.onnx"), "-o", out, "--inputs",
                 os.path.join(examples, "layernorm_eps.npz")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{out}: 9 node(s) FP16, 0 FP32,")
    assert ("FP32 pins (1): ln_add_eps (initializer; counted with 'ln_shift', FP16 in the written "
            "file)") in lines
