"""Operator schemas (onnx's, then onnxruntime's contrib ones) reduced to what typing needs:
each parameter's type string and the type variables' allowed types."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import NamedTuple

import onnx

from ..graph import ONNX_DOMAINS

logger = logging.getLogger(__name__)


class _Param(NamedTuple):
    type_str: str
    variadic: bool
    homogeneous: bool


class _Schema(NamedTuple):
    name: str
    since_version: int
    inputs: tuple[_Param, ...]
    outputs: tuple[_Param, ...]
    constraints: Mapping[str, frozenset]  # type variable -> allowed type strings


def _is_variadic(option: object) -> bool:
    return str(option).endswith("Variadic")


@functools.cache
def _onnx_schema(op_type: str, opset: int, domain: str) -> _Schema | None:
    try:
        s = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    return _Schema(
        s.name, s.since_version,
        tuple(_Param(p.type_str, _is_variadic(p.option), p.is_homogeneous) for p in s.inputs),
        tuple(_Param(p.type_str, _is_variadic(p.option), p.is_homogeneous) for p in s.outputs),
        {c.type_param_str: frozenset(c.allowed_type_strs) for c in s.type_constraints})


@functools.cache
def _ort_schemas() -> dict[tuple[str, str], list[_Schema]]:
    """Contrib-domain schemas as onnxruntime registers them (empty if it does not expose them)."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
        raw = ort_state.get_all_operator_schema()
    except Exception as e:  # an onnxruntime build without the schema export: contrib ops stay FP32
        logger.debug("onnxruntime exposes no operator schemas: %s", e)
        return {}
    out: dict[tuple[str, str], list[_Schema]] = {}
    for s in raw:
        if s.domain in ONNX_DOMAINS:
            continue
        schema = _Schema(
            s.name, s.since_version,
            tuple(_Param(p.typeStr, _is_variadic(p.option), p.isHomogeneous) for p in s.inputs),
            tuple(_Param(p.typeStr, _is_variadic(p.option), p.isHomogeneous) for p in s.outputs),
            {c.type_param_str: frozenset(c.allowed_type_strs) for c in s.type_constraints})
        out.setdefault((s.domain, s.name), []).append(schema)
    for versions in out.values():
        versions.sort(key=lambda x: x.since_version)
    return out


def find_schema(op_type: str, domain: str, opset: int) -> _Schema | None:
    """The schema in force for ``domain::op_type`` at ``opset`` (onnx's, else onnxruntime's)."""
    schema = _onnx_schema(op_type, opset, domain)
    if schema is not None or domain in ONNX_DOMAINS:
        return schema
    versions = [s for s in _ort_schemas().get((domain, op_type), []) if s.since_version <= opset]
    return versions[-1] if versions else None


def opset_map(model: onnx.ModelProto) -> dict[str, int]:
    out = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    return out


def _param_for(params: tuple[_Param, ...], index: int) -> _Param | None:
    if index < len(params):
        return params[index]
    if params and params[-1].variadic:
        return params[-1]
    return None


def groups(node: onnx.NodeProto, schema: _Schema) -> dict[tuple, list[tuple[bool, int]]]:
    """Type variable -> the node's (is_output, index) bound to it; one group per element of a
    heterogeneous variadic. Parameters of a fixed type belong to no group."""
    groups: dict[tuple, list[tuple[bool, int]]] = {}
    for is_out, names, params in ((False, node.input, schema.inputs), (True, node.output, schema.outputs)):
        for i, name in enumerate(names):
            param = _param_for(params, i)
            if not name or param is None or param.type_str not in schema.constraints:
                continue
            key: tuple = (param.type_str,) if param.homogeneous else (param.type_str, is_out, i)
            groups.setdefault(key, []).append((is_out, i))
    return groups
