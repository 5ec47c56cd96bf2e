"""The ``rotary-positions`` rule: integer positions cast to float, times inverse frequencies, into
Sin/Cos, where positions can pass the integers the 16-bit type holds exactly."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np
import onnx

from ...context import ModelContext
from ...graph import attr
from ...storage import read_array
from ...typing_rules import elem_type
from ..facts import HIGH, PRECISION, ModelFacts, finding
from ..ops import RuleOutput
from ..registry import rule, skip
from .common import MOVES, generation_of

ROTARY_REACH = 6  # moves between the Cast and the product, and between the product and Sin/Cos, at most
SMALL_FREQUENCIES = 4096  # inverse-frequency constants up to this many values are read for their largest


def _spacing(value: float, significand_bits: int) -> float:
    """The distance between neighbouring values of a type with ``significand_bits`` at ``value`` (> 0)."""
    return 2.0 ** (math.floor(math.log2(value)) - significand_bits)


@dataclass(frozen=True)
class RotaryPath:
    """Integer ``positions`` cast to float (``cast``), multiplied by the inverse frequencies
    ``frequencies`` (``product``, a Mul or MatMul; ``largest_frequency`` where read) into ``trig`` (Sin,
    Cos): ``nodes``, from the Cast to the Sin/Cos."""

    cast: str
    positions: str
    frequencies: str
    largest_frequency: float | None
    product: str
    trig: tuple[str, ...]
    nodes: tuple[str, ...]


def rotary_paths(ctx: ModelContext) -> Mapping[str, RotaryPath]:
    """Node -> the rotary position path it lies on, found once per context."""
    return ctx.memo(_rotary_paths)


def _rotary_paths(ctx: ModelContext) -> Mapping[str, RotaryPath]:
    found: dict[str, RotaryPath] = {}
    for ref in ctx.nodes:
        node = ref.node
        path = _rotary_from(ctx, node) if node.op_type == "Cast" and _integer_to_float(ctx, node) else None
        if path is not None:
            found.update({name: found.get(name, path) for name in path.nodes})
    return found


def _integer_to_float(ctx: ModelContext, cast: onnx.NodeProto) -> bool:
    source, to = elem_type(ctx.types.get(cast.input[0])), attr(cast, "to")
    return (bool(cast.output) and source is not None and to in ctx.wide_types
            and onnx.helper.tensor_dtype_to_np_dtype(source).kind in "iu")


def _rotary_from(ctx: ModelContext, cast: onnx.NodeProto) -> RotaryPath | None:
    """The path from ``cast`` through a product with constant frequencies to Sin/Cos, or None."""
    sources: dict[str, str] = {}  # product -> the constant it multiplies by

    def product(node: onnx.NodeProto, via: str) -> bool:
        others = [name for name in node.input if name != via]
        source = _constant_source(ctx, others[0]) if node.op_type in ("Mul", "MatMul") and len(others) == 1 \
            else None
        if source is not None:
            sources[node.name] = source
        return source is not None

    _, products = _paths_to(ctx, cast.output[0], product)
    nodes: dict[str, None] = {cast.name: None}
    trig: dict[str, None] = {}
    used = []
    for made in products:
        after, ends = _paths_to(ctx, made.output[0], _trigonometric)
        if ends:
            before, _ = _paths_to(ctx, cast.output[0], partial(_is, made))
            nodes.update(dict.fromkeys([*before, made.name, *after, *(n.name for n in ends)]))
            trig.update(dict.fromkeys(n.name for n in ends))
            used.append(made.name)
    if not used:
        return None
    order = {ref.name: i for i, ref in enumerate(ctx.nodes)}
    return RotaryPath(cast.name, cast.input[0], sources[used[0]], _largest(ctx, sources[used[0]]), used[0],
                      tuple(sorted(trig, key=order.__getitem__)), tuple(sorted(nodes, key=order.__getitem__)))


def _trigonometric(node: onnx.NodeProto, _: str) -> bool:
    return node.op_type in ("Sin", "Cos")


def _is(wanted: onnx.NodeProto, node: onnx.NodeProto, _: str) -> bool:
    return node is wanted


def _paths_to(ctx: ModelContext, tensor: str, end: Callable[[onnx.NodeProto, str], bool],
              ) -> tuple[list[str], list[onnx.NodeProto]]:
    """(the moves on the ways from ``tensor`` to the nodes ``end`` accepts, those nodes), following at most
    :data:`ROTARY_REACH` moves."""
    on_way: dict[str, None] = {}
    ends: dict[str, onnx.NodeProto] = {}

    def visit(name: str, left: int) -> bool:
        reached = False
        for ref in ctx.index.consumers.get(name, ()):
            node = ref.node
            if end(node, name):
                ends[node.name] = node
                reached = True
            elif node.op_type in MOVES and left > 0:
                if any([visit(out, left - 1) for out in node.output if out]):  # every branch visited
                    on_way[node.name] = None
                    reached = True
        return reached

    visit(tensor, ROTARY_REACH)
    return list(on_way), list(ends.values())


def _constant_source(ctx: ModelContext, name: str) -> str | None:
    """The constant ``name`` is moved or cast from (the inverse frequencies, unsqueezed and expanded to the
    positions' shape as transformers' rotary embedding writes them), or None."""
    for _ in range(ROTARY_REACH + 1):
        if name in ctx.constants:
            return name
        made = ctx.index.producers.get(name)
        if made is None or made.node.op_type not in MOVES | {"Cast"} or not made.node.input:
            return None
        name = made.node.input[0]
    return None


def _largest(ctx: ModelContext, name: str) -> float | None:
    tensor = ctx.constants[name]
    if math.prod(tensor.dims) > SMALL_FREQUENCIES or tensor.data_type not in ctx.wide_types:
        return None
    values = np.abs(np.asarray(read_array(tensor, ctx.base_dir), dtype=np.float64))
    return float(values.max()) if values.size else None


def position_bound(facts: ModelFacts) -> int | None:
    """The length positions stay below (the generation's max length), or None where none is known."""
    generation = generation_of(facts)
    return None if generation is None else generation.max_length


@rule("Cast", "Mul", "MatMul", "Sin", "Cos", *sorted(MOVES))
def rotary_positions(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """Integer positions, cast to float, times inverse frequencies into Sin/Cos, where positions can pass
    the integers the 16-bit type holds exactly (2048 in FP16)."""
    path = rotary_paths(facts.ctx).get(node.name)
    if path is None:
        yield skip("not on a path from integer positions to Sin/Cos")
        return
    low, bound = facts.low, position_bound(facts)
    exact = low.exact_int
    if bound is not None and bound - 1 <= exact:
        yield skip(f"positions stay below {bound} (the generation's max length): exact in {low.name} "
                   f"(up to {exact})")
        return
    reach = f"reach {bound - 1} (max length {bound})" if bound is not None else \
        f"can pass {exact} (no max length known)"
    evidence: dict[str, object] = {"positions": path.positions, "cast": path.cast,
                                   "frequencies": path.frequencies, "sin_cos": "/".join(path.trig),
                                   "position_bound": bound if bound is not None else "none known",
                                   "exact_up_to": exact}
    angles = ""
    if bound is not None and path.largest_frequency:
        angle = (bound - 1) * path.largest_frequency
        spacing = _spacing(angle, low.significand_bits)
        evidence.update(largest_angle=angle, angle_spacing=spacing)
        angles = f"; angles up to {angle:.4g} rad are {spacing:g} rad apart there"
    yield finding(node, "rotary-positions", PRECISION, HIGH,
                  f"positions cast from '{path.positions}' {reach}: {low.name} holds integers exactly only "
                  f"up to {exact}{angles}; the {len(path.nodes)} node(s) from '{path.cast}' to "
                  f"{'/'.join(path.trig)} stay FP32", True, **evidence)

