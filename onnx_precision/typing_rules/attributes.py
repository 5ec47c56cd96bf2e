"""Attributes that choose an output's element type, retargeted to float16 for an FP16 node."""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from ..float_types import FP16, LowPrecision
from ..storage import cast_initializer
from .schemas import opset_map
from .types import FLOAT, WIDE, elem_type, with_elem_type


def retarget_attributes(node: onnx.NodeProto, model: onnx.ModelProto, base_dir: str = ".",
                        low: LowPrecision = FP16) -> None:
    """In place: attributes that choose a float output type (Cast ``to``, ``dtype``, Optional's
    ``type``, ConstantOfShape's value) choose the ``low`` type, for a node whose float outputs convert."""
    to = low.elem_type
    for attr in node.attribute:
        if attr.name == "to" and node.op_type == "Cast" and attr.i in WIDE:
            attr.i = to
        elif attr.name in _DTYPE_ATTRS and attr.type == onnx.AttributeProto.INT and attr.i in WIDE:
            attr.i = to
        elif attr.type == onnx.AttributeProto.TYPE_PROTO and elem_type(attr.tp) in WIDE:
            attr.tp.CopyFrom(with_elem_type(attr.tp, to))
        elif node.op_type == "ConstantOfShape" and attr.name == "value" and attr.t.data_type in WIDE:
            attr.t.CopyFrom(cast_initializer(attr.t, base_dir, to, attr.t.name))
    present = {a.name for a in node.attribute}
    if node.op_type == "ConstantOfShape" and "value" not in present:
        node.attribute.append(onnx.helper.make_attribute(
            "value", onnx.helper.make_tensor("value", to, [1], [0.0])))
    schema_attrs = _schema_attributes(node, model)
    if "dtype" in schema_attrs and "dtype" not in present:
        # the default (float, or the input's type) would no longer be float16
        node.attribute.append(onnx.helper.make_attribute("dtype", to))
    for name in _DTYPE_ATTRS[1:]:
        default = schema_attrs.get(name)
        if (
            name not in present
            and default is not None
            and default.default_value.type == onnx.AttributeProto.INT
            and default.default_value.i == FLOAT
        ):  # e.g. the window ops' output_datatype
            node.attribute.append(onnx.helper.make_attribute(name, to))


# attributes that choose an output's element type
_DTYPE_ATTRS = ("dtype", "output_datatype", "output_dtype")


def _schema_attributes(node: onnx.NodeProto, model: onnx.ModelProto) -> Mapping:
    domain = "" if node.domain == "ai.onnx" else node.domain
    opset = opset_map(model).get(domain)
    try:
        return {} if opset is None else onnx.defs.get_schema(node.op_type, opset, domain).attributes
    except onnx.defs.SchemaError:
        return {}
