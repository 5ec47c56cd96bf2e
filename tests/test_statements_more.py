"""Every statement a run makes is true of the file it writes, and the commands it suggests work when
pasted (issue 23): the notes, the ``next:`` line, the thin-pass note and the 16-bit shares."""

from __future__ import annotations

from models.stacks import layer_norm_stack
from onnx_precision import policy
from onnx_precision.context import ModelContext
from onnx_precision.rewriter import rewrite
from onnx_precision.target import TensorRTTarget


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
