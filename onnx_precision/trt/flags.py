"""TensorRT command lines for a precision plan.

Two artefacts serve two generations of TensorRT:

* 8.6 - 10.11 (weakly typed): ``--fp16 --precisionConstraints=obey`` with ``--layerPrecisions`` and
  ``--layerOutputTypes`` naming every FP32 layer exactly. TensorRT names a layer after its ONNX node,
  and the loader names unnamed nodes ``node_of_<first output>`` as TensorRT does, so the same flags
  apply to the original FP32 model and to the converted one. Wildcards are never used: TensorRT
  resolves overlapping wildcards arbitrarily.
* 10.12+ deprecates and 11.0 removes those flags: the Cast-pinned model is the artefact, built with
  ``--stronglyTyped`` (always on in 11), so the types written in the model are the types that run.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ..errors import PlanError
from ..model_io import walk_nodes
from ..plan import PrecisionPlan
from ..typing_rules import elem_type, tensor_types

# Constant becomes weights, not a layer; Shape and Size read only metadata, never float values.
_NOT_FLOAT_LAYERS = frozenset({"Constant", "Shape", "Size"})

_TRT_TYPE_NAMES = {
    onnx.TensorProto.FLOAT: "fp32",
    onnx.TensorProto.FLOAT16: "fp16",
    onnx.TensorProto.BFLOAT16: "bf16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.BOOL: "bool",
}

_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)


@dataclass(frozen=True)
class TrtFlags:
    """The per-layer constraints for the FP32 nodes of a plan: (layer name, precision) and
    (layer name, output types)."""

    layer_precisions: tuple[tuple[str, str], ...]
    layer_output_types: tuple[tuple[str, tuple[str, ...]], ...]

    def weakly_typed_args(self) -> list[str]:
        args = ["--fp16"]
        if self.layer_precisions:
            args += [
                "--precisionConstraints=obey",
                "--layerPrecisions=" + ",".join(f"{n}:{p}" for n, p in self.layer_precisions),
                "--layerOutputTypes=" + ",".join(f"{n}:{'+'.join(t)}" for n, t in self.layer_output_types),
            ]
        return args


def _check_name(name: str) -> None:
    bad = [c for c in ",:" if c in name]
    if bad:
        raise PlanError(
            f"node '{name}' is pinned to FP32 but its name contains '{bad[0]}', which trtexec cannot parse in "
            f"--layerPrecisions; rename the node in the model, or use the Cast-pinned model with --stronglyTyped")


def trt_flags(model: onnx.ModelProto, plan: PrecisionPlan) -> TrtFlags:
    """Flags pinning the plan's FP32 nodes that TensorRT turns into layers computing on floats.

    Integer-only nodes (shape arithmetic) and Constant nodes are left out: they are not float
    layers, and naming them would only make trtexec warn about unknown layers.
    """
    types = {name: elem_type(tp) for name, tp in tensor_types(model).items()}
    precisions: list[tuple[str, str]] = []
    output_types: list[tuple[str, tuple[str, ...]]] = []
    for ref in walk_nodes(model.graph):
        node = ref.node
        if plan.is_fp16(node.name) or node.name not in plan.decisions or node.op_type in _NOT_FLOAT_LAYERS:
            continue
        if not _computes_on_floats(node, types):
            continue
        _check_name(node.name)
        precisions.append((node.name, "fp32"))
        out_types = tuple(_output_type_name(types.get(o)) for o in node.output if o)
        output_types.append((node.name, out_types))
    return TrtFlags(tuple(precisions), tuple(output_types))


def _computes_on_floats(node: onnx.NodeProto, types: Mapping[str, int]) -> bool:
    return any(types.get(t) in _FLOAT_TYPES for t in list(node.input) + list(node.output) if t)


def _output_type_name(elem_type: int | None) -> str:
    # A float output of an FP32-pinned layer is FP32 by definition of the pin; other outputs keep
    # their own type so the constraint list stays complete.
    if elem_type is None or elem_type in _FLOAT_TYPES:
        return "fp32"
    return _TRT_TYPE_NAMES.get(elem_type, "fp32")


def trt_flags_text(model: onnx.ModelProto, plan: PrecisionPlan, original_path: str, converted_path: str) -> str:
    """The --trt-flags file: one trtexec line per TensorRT generation, each with a comment saying which."""
    flags = trt_flags(model, plan)
    weak = " ".join(shlex.quote(a) for a in flags.weakly_typed_args())
    n = len(flags.layer_precisions)
    return "\n".join([
        f"# onnx-precision: TensorRT flags for {n} layer(s) pinned to FP32.",
        "# TensorRT 8.6 to 10.11 (weakly typed; these flags are deprecated in 10.12 and removed in 11.0).",
        "# They name layers exactly after the ONNX nodes, so they apply to the original FP32 model too:",
        f"trtexec --onnx={shlex.quote(original_path)} {weak}",
        "# TensorRT 10.12 and later, and 11.x (strong typing always on): build the Cast-pinned model as written:",
        f"trtexec --onnx={shlex.quote(converted_path)} --stronglyTyped",
        "",
    ])
