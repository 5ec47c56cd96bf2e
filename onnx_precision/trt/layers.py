"""The vocabulary of the op table: TensorRT layers and how onnx-tensorrt names them.

onnx-tensorrt names a layer only when an importer calls ``ImporterContext::registerLayer``:

* with the node (``registerLayer(layer, node)``): the node's name (``getNodeName``: its name, or
  ``node_of_<first output>`` when it has none), made unique by ``generateUniqueName`` in
  weightUtils.cpp: the name itself when free, else ``<name>_<k>`` with ``k`` from ONE counter
  shared by the whole network (layer names, tensor names and ``tmp_weight`` names all advance it);
* with a parser-internal basename (``ONNXTRT_squeezeTensor``, ``ONNXTRT_castHelper``, ...);
* not at all: the layer keeps TensorRT's default name, ``(Unnamed Layer* <index>) [<type>]``,
  which depends on the layer's position in the whole network, so no flag can be written for it.

Which layers get which kind of name decides what ``--layerPrecisions`` can pin (see :mod:`.flags`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Naming(Enum):
    NODE = "node"          # registerLayer(layer, node): <name>, then <name>_<k>
    HELPER = "helper"      # registerLayer(layer, "ONNXTRT_...", nullptr): not the node's name
    UNNAMED = "unnamed"    # never registered: "(Unnamed Layer* N) [Type]", unreachable by name


@dataclass(frozen=True)
class TrtLayer:
    """One TensorRT layer an ONNX node becomes. ``computes`` is False for layers that only move or
    select values (Shuffle, Slice, Iterator, a Cast of a 0/1 mask): their precision changes no value
    that a computing layer has not already stored. ``float_output`` is False for a comparison's
    bool output (trtexec must not be given an output type for it). ``recurrent`` marks a loop-body
    layer whose output feeds it again on the next iteration (its stored precision compounds)."""

    kind: str
    naming: Naming
    computes: bool = True
    float_output: bool = True
    helper: str = ""  # the basename of a HELPER layer
    recurrent: bool = False

    def __str__(self) -> str:
        return f"{self.kind} ({self.naming.value})"


def named(kind: str, *, float_output: bool = True) -> TrtLayer:
    """A computing layer registered with the node."""
    return TrtLayer(kind, Naming.NODE, float_output=float_output)


def unnamed(kind: str) -> TrtLayer:
    """A computing layer the importer never registers."""
    return TrtLayer(kind, Naming.UNNAMED)


def mover(kind: str, naming: Naming = Naming.UNNAMED, helper: str = "") -> TrtLayer:
    """A layer that only moves values (its precision is not a numerical question)."""
    return TrtLayer(kind, naming, computes=False, helper=helper)
