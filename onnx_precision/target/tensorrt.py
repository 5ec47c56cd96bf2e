"""The TensorRT target: FP16 nodes as the layers onnx-tensorrt builds for them, per release.

TensorRT's ONNX parser builds some ops from several layers (ReduceL2 as x*x, a sum and a square
root; LogSoftmax as SoftMax then Log), each of which stores FP16 when the network runs in FP16;
the emulation spells such a node as those layers with FP16 rounding between them
(:mod:`onnx_precision.trt.ops`). The written model is built by TensorRT, not run by onnxruntime,
so onnxruntime's CPU kernels decide nothing here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import onnx

from ..float_types import BF16, FP16, LowPrecision
from ..graph import is_onnx_domain, onnx_opset
from ..suggested import RunArgs, quoted
from ..trt.flags import strongly_typed_build
from ..trt.ops import decompose, normalization_in_input_precision
from ..trt.spell import DecompositionError
from ..trt.versions import NEWEST, TrtVersion
from ..typing_rules import tensor_types
from ..typing_rules.constant_values import small_constant_arrays
from .base import Target
from .bf16_kernels import trt_has_bf16
from .commands import Commands
from .emulation import UNMEASURED, Emulation, Fresh, Measured, Spelling
from .quantize import Quantizing

log = logging.getLogger(__name__)

SMALL_CONSTANT = 64  # elements: the constants an importer reads at build time (axes) are small
# Ops whose importer stores an internal value in FP16 between layers, and where (for rule messages).
_LAYERED = {"ReduceL2": "stores it in {low}", "ReduceLogSumExp": "stores it in {low}",
            "LogSoftmax": "computes Softmax then Log"}
# Whether the ONNX parser takes an ai.onnx op in a 16-bit type, for each type onnxruntime's CPU provider has
# no kernels for (LowPrecision.cpu_kernels; FP16 it takes everywhere): a new such type adds its table here
_PARSER_TAKES: Mapping[str, Callable[[str], bool]] = {BF16.precision: trt_has_bf16}


@dataclass(frozen=True)
class TensorRTTarget(Target):
    version: TrtVersion = NEWEST
    low: LowPrecision = FP16
    fallback: LowPrecision | None = None

    @property
    def name(self) -> str:
        return f"tensorrt {self.version}"

    @property
    def title(self) -> str:
        return f"TensorRT {self.version}"

    def onnxruntime_kernels(self, low: LowPrecision) -> bool:
        return False

    def kernel_blocker(self, node: onnx.NodeProto, low: LowPrecision, opset: int) -> str | None:
        if low.cpu_kernels or not is_onnx_domain(node.domain) or _PARSER_TAKES[low.precision](node.op_type):
            return None
        return f"{self.title}'s ONNX parser takes no {low.type_name} {node.op_type}"

    @property
    def emulation(self) -> Emulation:
        return TrtEmulation(self.version, self.quantizes_by_reciprocal)

    @property
    def commands(self) -> Commands:
        return TrtCommands(self.low, self.version)

    @property
    def quantizes_by_reciprocal(self) -> bool:
        # "In the reverse direction, quantization uses the reciprocal scale, followed by clamping and
        # rounding (for integers) or casting (for FP8 and FP4)" (TensorRT 10.11 developer guide, Working
        # with Quantized Types, https://docs.nvidia.com/deeplearning/tensorrt/10.11.0/inference-library/
        # work-quantized-types.html); IQuantizeLayer's scale has the input's type (T1: float16, bfloat16,
        # float32, operators/docs/Quantize.html). Which type holds the reciprocal is not said: it is
        # taken to be the scale's, as torchao's FP16 -> FP8 cast did (pytorch/ao issue 1766).
        return True

    @property
    def normalizes_in_input_precision(self) -> bool:
        # onnx-tensorrt's LayerNormalization importer reads stash_type but, strongly typed, neither
        # casts X to it nor may call setComputePrecision (10.6 onnxOpImporters.cpp: "if
        # (!stronglyTyped) { layer->setComputePrecision(computeType); }"; 10.15 the same through
        # ctx->isStronglyTyped(); InstanceNormalization and GroupNormalization, normalizationHelper in
        # importerUtils.cpp, never read it); NvInfer.h from 10.1: "Strongly typed network rejects
        # calls to this method since the compute precision is typically controlled by casting the
        # input tensors", and 11.0 removes the method. Only RMSNormalization (10.15) casts to
        # stash_type. The Cast-pinned model is built strongly typed: its FP16 LayerNorms are taken to
        # compute their statistics in FP16.
        return True

    def stored_in_layers(self, op_type: str) -> str:
        where = _LAYERED.get(op_type)
        return f"{self.title} {where.format(low=self.low.name)}" if where else ""


@dataclass(frozen=True)
class TrtEmulation(Emulation):
    """Each 16-bit node as the layers of one TensorRT release (:class:`TrtLayers`), a QuantizeLinear by the
    reciprocal of its scale (``reciprocal``)."""

    version: TrtVersion = NEWEST
    reciprocal: bool = True

    def spelling(self, model: onnx.ModelProto, base_dir: str, types: Mapping[str, onnx.TypeProto] | None,
                 fresh: Fresh, measured: Measured = UNMEASURED) -> Spelling:
        layers = TrtLayers(model, self.version, base_dir, tensor_types(model) if types is None else types,
                           fresh)
        return Quantizing(layers, self.reciprocal, fresh)


@dataclass(frozen=True)
class TrtCommands(Commands):
    """TensorRT's: ``--target tensorrt`` (``--trt-version`` but for the newest), and the engine build of the
    written model as its next step."""

    version: TrtVersion = NEWEST

    def cli_args(self) -> list[str]:
        version = ["--trt-version", str(self.version)] if self.version != NEWEST else []
        return ["--target", "tensorrt", *version, *super().cli_args()]

    def next_step(self, model: onnx.ModelProto, run: RunArgs) -> str:
        args, profile = strongly_typed_build(model, run)
        missing = "".join(f"; {p}" for p in (*profile.problems, profile.sampled_range()) if p)
        return (f"{quoted(args)}  # TensorRT 9.0 and later builds it as written (--trt-flags for older)"
                f"{missing}")


class TrtLayers(Spelling):
    """Spells FP16 nodes of one model as the layers of one TensorRT release."""

    def __init__(self, model: onnx.ModelProto, version: TrtVersion, base_dir: str,
                 types: Mapping[str, onnx.TypeProto], fresh: Fresh) -> None:
        self.version = version
        self.opset = onnx_opset(model, 13)
        self.types = types
        self.fresh = fresh
        self.constants = small_constant_arrays(model, base_dir, SMALL_CONSTANT)

    def spell(self, node: onnx.NodeProto, low: LowPrecision = FP16) -> list[onnx.NodeProto]:
        if not is_onnx_domain(node.domain):
            return [node]
        shape = self.types.get(node.input[0]) if node.input else None
        rank = (len(shape.tensor_type.shape.dim) if shape is not None and shape.HasField("tensor_type")
                and shape.tensor_type.HasField("shape") else None)
        if node.op_type == "LayerNormalization":
            steps = normalization_in_input_precision(node, opset=self.opset, fresh=self.fresh, rank=rank,
                                                     low=low)
            return [node] if steps is None else steps
        try:
            spelled = decompose(node, opset=self.opset, fp16=True, version=self.version, fresh=self.fresh,
                                constants=self.constants, rank=rank, low=low)
        except DecompositionError as e:  # an axis or rank not known here: emulate it as one op
            log.debug("%s: emulated as one op (%s)", node.name, e)
            return [node]
        return [node] if spelled is None else list(spelled.nodes)

    def layer_kinds(self, node: onnx.NodeProto) -> list[str]:
        if not is_onnx_domain(node.domain):
            return [node.op_type]
        try:
            spelled = decompose(node, opset=self.opset, fp16=True, version=self.version,
                                constants=self.constants)
        except DecompositionError:
            return [node.op_type]
        if spelled is None:
            return [node.op_type]
        return [layer.kind for layer, _ in spelled.layers if layer.computes]
