"""Emulating a written FP16/BF16/mixed model: the FP32 graph that rounds at each of its 16-bit tensors.

Any candidate model (ours, or another tool's) can then be checked on CPU. Its FP16 weights stored
as external data stay there, each followed by a ``Cast(to=FLOAT)`` (exact), so the emulation of a
model over 2 GB is as small as the model's proto. External data is always read relative to the
model's own directory (``base_dir``), never the working directory.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..float_types import LOW_TYPES
from ..graph import is_onnx_domain, subgraphs
from ..quantized import QUANTIZE, is_qdq
from ..storage import element_count, external_location, inline_small_external, read_array
from ..storage.external_data import INLINE_EXTERNAL_BYTES
from ..target import GENERIC, UNMEASURED, Measured, Spelling, Target
from .rounding import FLOAT, Names, elem_types, round_nodes


def emulate_model(model: onnx.ModelProto, base_dir: str, target: Target = GENERIC,
                  in_place: bool = False, measured: Measured = UNMEASURED,
                  types: Mapping[str, onnx.TypeProto] | None = None) -> onnx.ModelProto:
    """The FP32 graph of an FP16/BF16/mixed ``model`` that rounds every 16-bit tensor to its type.

    16-bit graph inputs become FP32 inputs rounded on entry; 16-bit initializers and constants become
    FP32 (exactly); every node output that was 16-bit is rounded where it is produced; a Cast to
    FLOAT16 or BFLOAT16 becomes a round trip. Graph outputs that were 16-bit are FP32 holding such
    values. With a
    target that builds an FP16 node from several layers (TensorRT), the node is emulated as them; one
    that sums in FP16 checks each sum but those ``measured`` proves in range (the run that wrote it).
    ``in_place``: ``model`` itself becomes the emulation (a model read for it alone: no copy of it).
    ``types``: every value's type in ``model``, where the caller has them (one model emulated for several
    targets), else inferred here.
    """
    elems = elem_types(model, types)
    out = model if in_place else onnx.ModelProto()
    if not in_place:
        out.CopyFrom(model)
    inline_small_external(out, base_dir)
    names = Names(out)
    layers = target.emulation.spelling(out, base_dir, types, names.fresh, measured)
    _emulate_graph(out.graph, elems, names, base_dir, layers, is_main=True)
    return out


def _to_float(vi: onnx.ValueInfoProto) -> None:
    if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in LOW_TYPES:
        vi.type.tensor_type.elem_type = FLOAT


def _float_tensor(t: onnx.TensorProto, base_dir: str) -> onnx.TensorProto:
    values = np.asarray(read_array(t, base_dir)).astype(np.float32)
    return numpy_helper.from_array(values, t.name)


def _float_initializers(graph: onnx.GraphProto, names: Names, base_dir: str) -> list[onnx.NodeProto]:
    """Make ``graph``'s FP16 initializers FP32 (exact), in place; returns the Casts to run first.

    An external one, or an inline one of INLINE_EXTERNAL_BYTES or more, keeps its FP16 data, renamed,
    and a ``Cast(to=FLOAT)`` produces the original name: an FP32 copy in the proto would double the
    weights (and the memory a verification takes), and for a model over 1 GB of FP16 pass
    protobuf's 2 GB. Small ones are converted in place (onnxruntime's shape inference reads shape
    constants). One that is also a graph input (IR < 4) cannot become a node output, so it is
    converted in the proto.
    """
    inputs = {vi.name for vi in graph.input}
    casts = []
    for init in graph.initializer:
        if init.data_type not in LOW_TYPES:
            continue
        small = external_location(init) is None and 2 * element_count(init) < INLINE_EXTERNAL_BYTES
        if small or init.name in inputs:
            init.CopyFrom(_float_tensor(init, base_dir))
            continue
        name = init.name
        init.name = names.fresh(f"{name}__{LOW_TYPES[init.data_type].precision}")
        casts.append(helper.make_node("Cast", [init.name], [name], to=FLOAT,
                                      name=names.fresh(name + "__cast")))
    return casts


def _emulate_graph(graph: onnx.GraphProto, types: Mapping[str, int], names: Names, base_dir: str,
                   layers: Spelling, is_main: bool) -> None:
    for vi in list(graph.output) + list(graph.value_info):
        _to_float(vi)
    new_nodes: list[onnx.NodeProto] = _float_initializers(graph, names, base_dir)
    renamed_inputs: dict[str, str] = {}
    # FP16 graph inputs: the caller feeds FP32; round on entry (a subgraph's inputs are already
    # rounded by whoever produced them).
    for vi in graph.input:
        low = LOW_TYPES.get(vi.type.tensor_type.elem_type) if vi.type.HasField("tensor_type") else None
        if low is not None:
            vi.type.tensor_type.elem_type = FLOAT
            if is_main:
                dst = names.fresh(vi.name + "__rounded")
                new_nodes.extend(round_nodes(vi.name, dst, names, low))
                renamed_inputs[vi.name] = dst
    for node in graph.node:
        for _, sub in subgraphs(node):
            _emulate_graph(sub, types, names, base_dir, layers, is_main=False)
        _retype_attributes(node, base_dir)
        lows = [LOW_TYPES[types[o]] for o in node.output if o and types.get(o) in LOW_TYPES]
        if is_qdq(node) and node.op_type == QUANTIZE and types.get(node.input[0]) in LOW_TYPES:
            lows = [LOW_TYPES[types[node.input[0]]]]  # its output is integer: its input says it is 16-bit
        rounds: list[onnx.NodeProto] = []
        for i, o in enumerate(node.output):
            if not o or types.get(o) not in LOW_TYPES:
                continue
            low = LOW_TYPES[types[o]]
            if node.op_type == "Cast" and is_onnx_domain(node.domain):
                # The Cast itself rounds to the 16-bit type; only the way back to FP32 is added.
                half = names.fresh(f"{o}__{low.precision}")
                node.output[i] = half
                back = helper.make_node("Cast", [half], [o], to=FLOAT, name=names.fresh(o + "__cast"))
                rounds.append(back)
            else:
                exact = names.fresh(o + "__exact")
                node.output[i] = exact
                rounds.extend(round_nodes(exact, o, names, low))
        # spelled on the model's own input names, whose types the spelling reads (the rank of a
        # LayerNormalization's input under TensorRT), then fed the rounded graph inputs
        spelled = layers.spell(node, lows[0]) if lows and node.op_type != "Cast" else [node]
        for step in spelled:
            step.input[:] = [renamed_inputs.get(name, name) for name in step.input]
        new_nodes.extend(spelled + rounds)
    # A graph output that is itself an FP16 graph input passes through unrounded: rounding it would
    # need a node writing that name, which SSA forbids, and the value is exactly what was fed.
    del graph.node[:]
    graph.node.extend(new_nodes)


# Attributes that choose an output's element type (the window ops' output_datatype included:
# left FLOAT16 onnxruntime would compute the window in FP16 arithmetic, not FP32 then round).
_OUTPUT_TYPE_ATTRS = ("dtype", "to", "output_datatype", "output_dtype")


def _retype_attributes(node: onnx.NodeProto, base_dir: str) -> None:
    """16-bit tensor attributes become FP32 (exact); outputs are rounded after the node anyway."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in LOW_TYPES:
            values = np.asarray(read_array(attr.t, base_dir)).astype(np.float32)
            attr.t.CopyFrom(numpy_helper.from_array(values, attr.t.name))
        elif (attr.name in _OUTPUT_TYPE_ATTRS and attr.type == onnx.AttributeProto.INT
              and attr.i in LOW_TYPES and node.op_type != "Cast"):
            attr.i = FLOAT
