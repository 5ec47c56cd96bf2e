"""Typing: which tensors of a node become float16 when the node runs in FP16, read from operator schemas.

A node's inputs and outputs are grouped by the schema's type variables (a heterogeneous variadic
parameter, as in If/Loop/Scan, gives one group per element). A group *converts* when it is bound
to float32 in this model (by shape inference) and the variable allows the float16 counterpart of
that type: those inputs/outputs become float16 in an FP16 node. Parameters with a fixed type
(``tensor(float)``, e.g. Resize scales) and variables that allow no float16 (LayerNormalization's
Mean/InvStdDev) keep float32. Integer and bool tensors are never touched.

A group that is one input and no output (Cast's input, Shape's input, Pow's exponent, Resize's
roi) is *flexible*: an FP16 node takes that tensor in whichever precision it has in the written
model, so no Cast is needed for it and the oracle must not round it.

:func:`onnx_precision.policy.resolve` turns a requested plan into one that can be written from what
this package answers.

Modules: :mod:`.types` (TypeProto helpers), :mod:`.schemas`, :mod:`.inference` (every value's
type), :mod:`.node_typing` (the schema's answer), :mod:`.kernels` (onnxruntime's answer, probed
and cached per process), :mod:`.attributes`, :mod:`.constant_values` (what a 16-bit copy of a float
constant would do).
"""

from __future__ import annotations

from .attributes import retarget_attributes
from .constant_values import constant_tensor, constant_values, constant_verdict, flush_note, value_problem
from .inference import tensor_types, tensor_types_at
from .kernels import model_typing, node_typing, ort_blocker
from .node_typing import NodeTyping, schema_typing
from .schemas import find_schema, opset_map
from .types import FLOAT, FLOAT16, WIDE, elem_type, is_tensor, type_name, type_string, with_elem_type

__all__ = ["retarget_attributes", "constant_tensor", "constant_values", "constant_verdict", "flush_note",
           "value_problem", "tensor_types", "tensor_types_at", "model_typing", "node_typing", "ort_blocker",
           "NodeTyping",
           "schema_typing", "find_schema", "opset_map",
           "FLOAT", "FLOAT16", "WIDE", "elem_type", "is_tensor", "type_name", "type_string", "with_elem_type"]
