"""Spelling the layers TensorRT builds for an ONNX node as ONNX nodes, one node per layer.

A :class:`Speller` is handed to an op's spelling function (see :mod:`.ops`). Each
:meth:`Speller.layer` call is one TensorRT layer: one ONNX node whose output is its own named
tensor. With ``fp16=True`` that tensor goes through ``Cast(FLOAT16) -> Cast(FLOAT)`` before the
next layer reads it, which is what TensorRT does when the layer runs in FP16: each layer computes
(in FP32 or better, as GPU kernels do) and stores FP16. The last layer writes the node's own output,
unrounded: the caller rounds node outputs as it does for every FP16 node. Constants that the
importer adds (``addConstantScalar``: an epsilon, Gemm's alpha) are stored the way an FP16 layer
reads them, rounded to FP16.

Layers that only move values (Shuffle, Slice, a Cast of a 0/1 mask) are recorded with
:meth:`Speller.move` and spelled only where the ONNX graph needs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..float_types import FP16, LowPrecision
from ..graph import fresh_name
from .layers import TrtLayer

FLOAT = TensorProto.FLOAT
FLOAT16 = TensorProto.FLOAT16

# Where each ONNX reduction takes its axes from an input instead of an attribute.
_AXES_INPUT_SINCE = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "Squeeze": 13, "Unsqueeze": 13}


class DecompositionError(ValueError):
    """The node cannot be spelled as layers with what the caller gave (a constant input is not known,
    or the rank is needed and unknown). TensorRT itself refuses some of these nodes."""


@dataclass(frozen=True)
class Decomposition:
    """The ONNX nodes that spell a node's TensorRT layers.

    ``nodes`` read the node's inputs and write its outputs; ``layers`` lists every TensorRT layer
    with the tensor holding its output (None for layers that only move values and are not
    spelled); ``rounded`` lists the tensors rounded to FP16 inside ``nodes`` (empty when spelled
    with ``fp16=False``), a Scan body's included."""

    nodes: tuple[onnx.NodeProto, ...]
    layers: tuple[tuple[TrtLayer, str | None], ...]
    rounded: tuple[str, ...]
    source: str

    @property
    def computing_layers(self) -> tuple[TrtLayer, ...]:
        return tuple(layer for layer, _ in self.layers if layer.computes)


def attribute(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def default_fresh(node: onnx.NodeProto) -> Callable[[str], str]:
    """Fresh names that avoid the node's own tensors, for spelling a node outside any model (tests,
    reference graphs). Inside a model, pass a ``fresh`` that avoids every name of the model."""
    taken = set(node.input) | set(node.output) | {node.name}
    return lambda base: fresh_name(base, taken)


class Speller:
    """Builds the ONNX nodes for one node's layers. ``dry`` spellings only record the layers (for
    naming and flags): constants that are not known are then replaced by placeholders."""

    def __init__(self, node: onnx.NodeProto, opset: int, *, fp16: bool, fresh: Callable[[str], str],
                 constants: Mapping[str, np.ndarray], rank: int | None, dry: bool = False,
                 low: LowPrecision = FP16, wide: int = FLOAT) -> None:
        self.node = node
        self.opset = opset
        self.fp16 = fp16  # spelled in the 16-bit type ``low`` (else in FP32)
        self.low = low
        self.wide = wide  # the type the spelling computes in, its constants' (float64 for a float64 node)
        self.fresh = fresh
        self.constants = constants
        self.rank = rank
        self.dry = dry
        self.nodes: list[onnx.NodeProto] = []
        self.layers: list[tuple[TrtLayer, str | None]] = []
        self.rounded: list[str] = []
        self.base = node.name or (node.output[0] if node.output else node.op_type)

    # --- reading the node ---

    def attr(self, name: str, default: object = None) -> object:
        return attribute(self.node, name, default)

    def int_attr(self, name: str, default: int) -> int:
        value = self.attr(name, default)
        return int(value) if isinstance(value, (int, float)) else default

    def float_attr(self, name: str, default: float) -> float:
        value = self.attr(name, default)
        return float(value) if isinstance(value, (int, float)) else default

    def ints_attr(self, name: str) -> list[int] | None:
        value = self.attr(name)
        return [int(v) for v in value] if isinstance(value, (list, tuple)) else None

    def input(self, index: int) -> str:
        """The node's input ``index`` ('' when absent)."""
        return self.node.input[index] if index < len(self.node.input) else ""

    def constant(self, name: str, placeholder: Sequence[int]) -> np.ndarray:
        """The value of the constant input ``name`` (an initializer or Constant output)."""
        if name in self.constants:
            return np.asarray(self.constants[name])
        if self.dry:
            return np.asarray(placeholder)
        raise DecompositionError(
            f"node '{self.node.name}' ({self.node.op_type}): input '{name}' must be a constant to spell its "
            f"TensorRT layers (onnx-tensorrt requires an initializer there too)")

    def need_rank(self) -> int:
        if self.rank is not None:
            return self.rank
        if self.dry:
            return 1
        raise DecompositionError(
            f"node '{self.node.name}' ({self.node.op_type}): the rank of input '{self.input(0)}' is needed "
            f"to spell its TensorRT layers")

    # --- writing nodes ---

    def _name(self, what: str) -> str:
        return self.fresh(f"{self.base}__trt_{what}")

    def _node(self, op_type: str, inputs: Sequence[str], output: str, **attrs: Any) -> None:
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=self._name(op_type.lower()),
                                           **attrs))

    def _round(self, src: str) -> str:
        half = self.fresh(f"{src}__{self.low.precision}")
        dst = self.fresh(f"{src}__rounded")
        self.nodes.append(helper.make_node("Cast", [src], [half], to=self.low.elem_type,
                                           name=self.fresh(f"{half}__cast")))
        self.nodes.append(helper.make_node("Cast", [half], [dst], to=self.wide,
                                           name=self.fresh(f"{dst}__cast")))
        self.rounded.append(src)
        return dst

    def layer(self, trt: TrtLayer, op_type: str, inputs: Sequence[str], *, final: bool = False,
              **attrs: Any) -> str:
        """Spell one computing layer as one ``op_type`` node; return the tensor the next layer reads
        (rounded to FP16 when spelled in FP16, except for the final layer and bool outputs)."""
        out = self.node.output[0] if final else self.fresh(f"{self.node.output[0]}__{len(self.layers)}_"
                                                          f"{op_type.lower()}")
        self._node(op_type, inputs, out, **attrs)
        self.layers.append((trt, out))
        if self.fp16 and not final and trt.float_output:
            return self._round(out)
        return out

    def move(self, trt: TrtLayer) -> None:
        """Record a layer that only moves values and needs no ONNX node of its own."""
        self.layers.append((trt, None))

    def helper_node(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        """An ONNX node that is no TensorRT computing layer (a transpose, a mask cast, a shape)."""
        out = self.fresh(f"{self.node.output[0]}__{op_type.lower()}")
        self._node(op_type, inputs, out, **attrs)
        return out

    def scalar(self, value: float) -> str:
        """A float constant as an FP16 layer reads it (importers add these with addConstantScalar)."""
        data = np.array(value, dtype=np.float32)
        if self.fp16:
            data = self.low.round(data)
        data = data.astype(helper.tensor_dtype_to_np_dtype(self.wide))
        out = self.fresh(f"{self.node.output[0]}__const")
        self.nodes.append(helper.make_node("Constant", [], [out], name=self._name("const"),
                                           value=numpy_helper.from_array(data, out)))
        return out

    def int64s(self, values: Sequence[int]) -> str:
        out = self.fresh(f"{self.node.output[0]}__axes")
        tensor = numpy_helper.from_array(np.array(list(values), dtype=np.int64), out)
        self.nodes.append(helper.make_node("Constant", [], [out], name=self._name("axes"), value=tensor))
        return out

    def axes_arg(self, op_type: str, axes: Sequence[int] | str | None) -> tuple[list[str], dict[str, Any]]:
        """``axes`` (a list, the name of a tensor holding them, or None) as ``op_type`` takes them at
        this opset: an extra input or an ``axes`` attribute."""
        by_input = self.opset >= _AXES_INPUT_SINCE[op_type]
        if axes is None:
            return [], {}
        if isinstance(axes, str):
            if by_input:
                return [axes], {}
            return [], {"axes": [int(a) for a in self.constant(axes, [0]).ravel()]}
        if by_input:
            return [self.int64s(axes)], {}
        return [], {"axes": [int(a) for a in axes]}

    def reduce(self, trt: TrtLayer, op_type: str, data: str, axes: Sequence[int] | str | None, *,
               keepdims: int, noop: int = 0, final: bool = False) -> str:
        extra, attrs = self.axes_arg(op_type, axes)
        attrs["keepdims"] = keepdims
        if noop and self.opset >= _AXES_INPUT_SINCE[op_type]:
            attrs["noop_with_empty_axes"] = noop
        return self.layer(trt, op_type, [data] + extra, final=final, **attrs)

    def node_axes(self) -> Sequence[int] | str | None:
        """The axes of a reduction node: its ``axes`` attribute, its axes input, or None (all)."""
        axes = self.ints_attr("axes")
        if axes is not None:
            return axes
        return self.input(1) or None

    def reduce_like_node(self, trt: TrtLayer, op_type: str, data: str, *, final: bool = False) -> str:
        """The node's own reduction (same axes, keepdims, noop_with_empty_axes) as ``op_type``."""
        return self.reduce(trt, op_type, data, self.node_axes(), keepdims=self.int_attr("keepdims", 1),
                           noop=self.int_attr("noop_with_empty_axes", 0), final=final)

    def result(self, source: str) -> Decomposition:
        return Decomposition(tuple(self.nodes), tuple(self.layers), tuple(self.rounded), source)


def round_graph(src: str, dst: str, fresh: Callable[[str], str], low: LowPrecision = FP16,
                wide: int = FLOAT) -> list[onnx.NodeProto]:
    """``dst = Cast(Cast(src, FLOAT16), wide)`` (or BFLOAT16; ``wide`` ``src``'s own type, float32 or
    float64): the rounding used inside subgraph bodies."""
    half = fresh(f"{src}__{low.precision}")
    return [helper.make_node("Cast", [src], [half], to=low.elem_type, name=fresh(f"{half}__cast")),
            helper.make_node("Cast", [half], [dst], to=wide, name=fresh(f"{dst}__cast"))]

