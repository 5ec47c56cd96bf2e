"""Loading, naming, walking and saving models.

Loading never pulls external data into memory (``load_external_data=False``): tensors stored
outside the proto are read on demand (:func:`initializer_array`, :func:`initializer_range` in
chunks), :func:`cast_initializer` converts them lazily, and :func:`save_model` streams them into
the output's data file, so a model over 2 GB is never held in memory (see ``external_data`` and
``saving``). Naming runs before anything else so that plans, reports and TensorRT flags all
point at the same nodes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from . import external_data as ext
from . import saving
from .errors import ModelLoadError


@dataclass
class LoadedModel:
    """A model proto whose external data (if any) still lives in files under ``base_dir``."""

    model: onnx.ModelProto
    path: str
    base_dir: str
    renamed: list[tuple[str, str]]  # (old name or "", new name) for every node the loader named


@dataclass(frozen=True)
class NodeRef:
    """A node and where it lives: ``graph_path`` is () for the main graph, else the chain of
    (owner node name, attribute name) leading to its subgraph."""

    node: onnx.NodeProto
    graph: onnx.GraphProto
    graph_path: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return self.node.name


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", g


def walk_nodes(graph: onnx.GraphProto, graph_path: tuple[tuple[str, str], ...] = ()) -> Iterator[NodeRef]:
    """Every node of ``graph`` and of its subgraphs, depth first, each owner before its bodies."""
    for node in graph.node:
        yield NodeRef(node, graph, graph_path)
        for attr_name, sub in subgraphs(node):
            yield from walk_nodes(sub, graph_path + ((node.name, attr_name),))


def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph in it, depth first."""
    yield graph
    for node in graph.node:
        for _, sub in subgraphs(node):
            yield from graphs(sub)


def model_names(model: onnx.ModelProto) -> set[str]:
    """Every name used in the model, subgraphs included: graph inputs, outputs, value_info,
    initializers, nodes and the tensors they read and write (a fresh name must avoid them all)."""
    names: set[str] = set()
    for graph in graphs(model.graph):
        names.update(v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info))
        names.update(t.name for t in graph.initializer)
        for node in graph.node:
            names.add(node.name)
            names.update(node.input)
            names.update(node.output)
    return names


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or the first ``base_<k>`` not in ``taken`` when it is; the result is added to ``taken``."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def name_nodes(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """Give every node a unique, deterministic name, in place; return the (old, new) renames.

    An unnamed node is called ``node_of_<first output>``, the name TensorRT gives its layer, so
    flags written for the converted model also apply to the original one. A name already taken
    gets the first free ``_<k>`` suffix. Named, unique nodes are never touched.
    """
    refs = list(walk_nodes(model.graph))
    taken = {r.node.name for r in refs if r.node.name}
    kept: set[str] = set()
    renames: list[tuple[str, str]] = []
    for ref in refs:
        node = ref.node
        old = node.name
        if old and old not in kept:
            kept.add(old)
            continue
        base = old or f"node_of_{node.output[0] if node.output and node.output[0] else node.op_type}"
        node.name = fresh_name(base, taken)
        renames.append((old, node.name))
    return renames


def load_model(path: str) -> LoadedModel:
    """Load ``path`` (external data left on disk), check it parses, and name its nodes."""
    if not os.path.exists(path):
        raise ModelLoadError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise ModelLoadError(f"{path}: not a file")
    try:
        model = onnx.load(path, load_external_data=False)
    except DecodeError:
        raise ModelLoadError(f"{path}: not an ONNX model (protobuf does not parse; truncated or another format)")
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{path}: cannot load: {e}")
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"{path}: not an ONNX model (no graph)")
    base_dir = os.path.dirname(os.path.abspath(path))
    check_external_data(model, base_dir, path)
    renamed = name_nodes(model)
    return LoadedModel(model, path, base_dir, renamed)


def external_location(tensor: onnx.TensorProto) -> str | None:
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return None
    for entry in tensor.external_data:
        if entry.key == "location":
            return entry.value
    return None


def check_external_data(model: onnx.ModelProto, base_dir: str, path: str) -> None:
    """Raise :class:`ModelLoadError` naming the tensor and file if an external data file is missing
    or too short for a tensor stored in it (nothing is read)."""
    ext.check_model_external_data(model, base_dir, path)


def initializer_array(tensor: onnx.TensorProto, base_dir: str) -> np.ndarray:
    """The tensor's values; external data is memory-mapped, not read whole (a lazily cast tensor
    from :func:`cast_initializer` is converted in memory)."""
    return ext.read_array(tensor, base_dir)


def atomic_write(path: str, write: Callable[[str], None], input_paths: tuple[str, ...] = ()) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path`` and rename it into place.

    Refuses to overwrite any of ``input_paths``; on failure nothing is left behind.
    """
    saving.write_files([(saving.check_output_path(path, tuple(input_paths)), write)])


def write_text(path: str, text: str, input_paths: tuple[str, ...] = ()) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write, input_paths)


def initializer_range(tensor: onnx.TensorProto, base_dir: str) -> tuple[float, float]:
    """(max |x|, smallest nonzero |x|) of a numeric tensor; (0, inf) when it is all zeros.

    External data is read in chunks, so memory stays bounded whatever the tensor's size.
    """
    return ext.value_range(tensor, base_dir)


def cast_initializer(tensor: onnx.TensorProto, base_dir: str, to: int, name: str) -> onnx.TensorProto:
    """A copy of ``tensor`` named ``name`` with element type ``to`` (values cast as ONNX Cast does:
    round to nearest even, never clamped).

    An external tensor is not read: the copy stays external and is converted chunk by chunk when
    :func:`save_model` writes it, so a large model is never held in memory.
    """
    if ext.is_external(tensor):
        return ext.lazy_cast(tensor, base_dir, to, name)
    return numpy_helper.from_array(ext.cast_values(numpy_helper.to_array(tensor), to), name)


def save_model(model: onnx.ModelProto, path: str, *, source_dir: str | None = None,
               external_data: bool | None = None, input_paths: tuple[str, ...] = ()) -> None:
    """Write ``model`` to ``path`` atomically (with its data file, if any); see :func:`saving.save_model`.

    ``source_dir`` is where tensors still marked external are read from. ``external_data``: True
    writes weights to ``<file name>.data`` beside ``path``; False writes one file unless the model
    is over 2 GB as read or as written; None keeps external weights external and goes external
    when over 2 GB.
    """
    saving.save_model(model, path, source_dir=source_dir, external_data=external_data,
                      input_paths=tuple(input_paths))
