"""Decoder hazards as rules: what FP16 breaks in a generation that one forward pass on the prefill hides.

Each finding says what it saw (the node, the constant's value, the position bound); the patterns are found
once per model context and shared with :mod:`onnx_precision.policy.decoder_rewrites` and
:mod:`onnx_precision.policy.decoder_pins`, which fix what a rule flags before the search pins anything.

* ``mask-sentinel``: an additive mask's sentinel (float32's minimum, -1e9) that the 16-bit type makes
  -inf, on its way to a Softmax: a fully masked row (a left-padded batch's padding) is all -inf there and
  its softmax NaN, which the next layer's keys carry to every row. Fixed by writing the sentinel finite,
  two binades inside the type's range (:func:`written_sentinel`,
  :mod:`~onnx_precision.policy.decoder_rewrites`).
* ``rotary-positions``: integer positions cast to float, times inverse frequencies, into Sin/Cos. The
  16-bit type holds integers exactly only up to 2048 (BF16: 256), and the angles are rounded at their
  magnitude: where positions can pass that (the generation's max length, or none known) the path from the
  Cast to the Sin/Cos is kept FP32 (:mod:`~onnx_precision.policy.decoder_pins`).
* ``rms-statistics``: an RMSNorm's mean of squares, x² past 65504 once |x| passes 256, as a decoder's
  residual stream does late in a generation. Its statistic is kept FP32, as LayerNormalization's
  ``stash_type`` 1 keeps a decomposed LayerNorm's (:mod:`onnx_precision.policy.layer_norm` writes those
  as one such node already: a centred mean of squares is not this rule's).
* ``residual-chain``: the residual stream's Adds, layer after layer (x + f(x), its x read by the branch
  too): its headroom shrinks with depth. Measured, not pinned: the finding places each Add in its chain,
  and the search decides.
* ``softcap``: c·tanh(x / c) (Gemma's logit and attention caps): tanh rounds to ±1 for |x/c| past 4.5 in
  FP16, so the capped values collapse onto ±c. Its Tanh and scale are kept FP32 where that stands.
* ``state-path``: the nodes between a recurrent state input and the output fed back into it at the next
  step (the generation's description knows the pairs): what each step adds accumulates over the steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import onnx

from ..context import ModelContext
from ..errors import PrecisionError
from ..float_types import LowPrecision
from ..graph import attr
from ..storage import read_array
from ..typing_rules import constant_tensor, elem_type
from .constants import MASK_MAGNITUDE
from .facts import (
    HIGH,
    LOW,
    MEDIUM,
    OVERFLOW,
    PRECISION,
    Finding,
    ModelFacts,
    confirm,
    finding,
    range_evidence,
)
from .ops import RuleOutput
from .registry import ANY_OP, rule, skip

if TYPE_CHECKING:
    from ..generation.description import Generation

# ops that move or select values without computing on them
MOVES = frozenset({"Unsqueeze", "Squeeze", "Reshape", "Flatten", "Transpose", "Expand", "Concat", "Slice",
                   "Identity", "Tile", "Gather"})
# what an additive mask goes through on its way to the Softmax: broadcasts, sums, selections
_MASK_PATH = MOVES | {"Add", "Sub", "Mul", "Where", "Min", "Max", "Cast"}
MASK_REACH = 4  # ops from the sentinel's node to the Softmax it masks, at most
ROTARY_REACH = 6  # moves between the Cast and the product, and between the product and Sin/Cos, at most
SMALL_FREQUENCIES = 4096  # inverse-frequency constants up to this many values are read for their largest
SOFTCAP_MATCH = 1e-3  # the scale equals the divisor to this relative difference
# A sentinel is written as this share of the 16-bit type's lowest finite value (-16376 in FP16): exp of it
# is 0 in every type, a score added to it stays finite up to |score| = 3/4 of the maximum, and the sum stays
# within the default headroom (max/2), so neither the headroom nor the range pins keep the mask's path FP32.
# The lowest value itself (-65504) makes every score below -16 -inf again, and on models/decoders' Llama
# both pins took the sentinel's Mul, the masked Adds and the Softmaxes (scores reach -65510 in FP32).
SENTINEL_SHARE = 0.25


def generation_of(facts: ModelFacts) -> Generation | None:
    """The generation the model runs: the caller's (``facts.generation``), else the one its names and the
    ``genai_config.json`` beside it describe; None for a model that runs none."""
    return facts.generation if facts.generation is not None else facts.ctx.memo(_inferred_generation)


def _inferred_generation(ctx: ModelContext) -> Generation | None:
    # imported here: the generation package's runner imports the oracle, which imports the rules
    from ..generation.infer import infer_generation

    try:
        return infer_generation(ctx.model, model_path=ctx.path)
    except PrecisionError:  # a config the generation stage refuses is its to report; the rules go without
        return None


def written_sentinel(low: LowPrecision) -> float:
    """What a mask sentinel is written as in ``low`` (:data:`SENTINEL_SHARE` of its lowest finite value)."""
    return -low.max * SENTINEL_SHARE


def _spacing(value: float, significand_bits: int) -> float:
    """The distance between neighbouring values of a type with ``significand_bits`` at ``value`` (> 0)."""
    return 2.0 ** (math.floor(math.log2(value)) - significand_bits)


# --- mask sentinels -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sentinel:
    """A mask sentinel the 16-bit type makes -inf: the float ``constant`` that ``node`` reads (None: the
    node is a ConstantOfShape and the sentinel its value), its most negative ``value``, and the Softmax
    ``softmax`` its mask reaches."""

    node: str
    constant: str | None
    value: float
    softmax: str


def sentinels(facts: ModelFacts, node: onnx.NodeProto) -> list[Sentinel]:
    """The mask sentinels ``node`` reads (or is: a ConstantOfShape of one) that the 16-bit type makes
    -inf and whose mask reaches a Softmax."""
    sources: list[tuple[str | None, np.ndarray | None]]
    if node.op_type == "ConstantOfShape":
        value = constant_tensor(node)
        sources = [(None, read_array(value, facts.ctx.base_dir))] if value is not None else []
    else:
        sources = [(name, facts.constant(name)) for name in node.input if name and facts.is_float(name)]
    found = []
    for name, values in sources:
        if values is None or values.size == 0 or values.dtype.kind != "f" or not _sentinel(values, facts):
            continue
        softmax = _masked_softmax(facts, node.output[0])
        if softmax is not None:
            found.append(Sentinel(node.name, name, float(np.min(values)), softmax))
    return found


def _sentinel(values: np.ndarray, facts: ModelFacts) -> bool:
    """Mask values (some hugely negative, none hugely positive) of which the 16-bit type makes some -inf."""
    wide = values.astype(np.float32)
    return (bool(np.any(wide <= -MASK_MAGNITUDE)) and not bool(np.any(wide >= MASK_MAGNITUDE))
            and bool(np.any(np.isneginf(facts.low.round(wide)))))


def _masked_softmax(facts: ModelFacts, tensor: str) -> str | None:
    """The first Softmax ``tensor`` reaches through at most :data:`MASK_REACH` mask-building ops."""
    frontier, seen = [tensor], set()
    for _ in range(MASK_REACH):
        following: list[str] = []
        for name in frontier:
            for ref in facts.index.consumers.get(name, ()):
                if ref.node.op_type in ("Softmax", "LogSoftmax"):
                    return ref.name
                if ref.node.op_type in _MASK_PATH and ref.name not in seen:
                    seen.add(ref.name)
                    following.extend(o for o in ref.node.output if o)
        frontier = following
    return None


def sentinel_finding(facts: ModelFacts, node: onnx.NodeProto, found: Sentinel) -> Finding:
    """The ``mask-sentinel`` finding of one sentinel: what it is, what the type makes of it, what it is
    written as."""
    low, written = facts.low, written_sentinel(facts.low)
    what = f"constant '{found.constant}'" if found.constant else f"{node.op_type} value"
    return finding(node, "mask-sentinel", OVERFLOW, HIGH,
                   f"mask sentinel {found.value:.4g} ({what}) is -inf in {low.name} and reaches Softmax "
                   f"'{found.softmax}': a fully masked row (left padding) is NaN there; written as "
                   f"{written:.6g} ({SENTINEL_SHARE:g} of {low.name}'s lowest finite value: scores added to "
                   f"it stay finite) before pinning", True,
                   constant=found.constant or f"{node.op_type} value", value=found.value,
                   softmax=found.softmax, written_as=written)


@rule("Add", "Sub", "Mul", "Where", "Min", "Max", "ConstantOfShape")
def mask_sentinel(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """An additive mask's sentinel that the 16-bit type makes -inf on its way to a Softmax."""
    found = sentinels(facts, node)
    if not found:
        yield skip(f"no mask value that {facts.low.name} makes -inf on its way to a Softmax")
    for sentinel in found:
        yield sentinel_finding(facts, node, sentinel)


# --- rotary positions ---------------------------------------------------------------------------------

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


# --- RMSNorm statistics -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RmsNorm:
    """x / sqrt(mean(x²) + eps) written node by node: the statistic's nodes (the square, the mean, the
    epsilon's Add, the Sqrt and, where x is multiplied by it, the inverse) and the node that normalises."""

    x: str
    square: str
    mean: str
    add_eps: str
    sqrt: str
    inverse: str | None
    normalize: str
    epsilon: float

    @property
    def statistic(self) -> tuple[str, ...]:
        return (self.square, self.mean, self.add_eps, self.sqrt) + ((self.inverse,) if self.inverse else ())


def rms_norms(ctx: ModelContext) -> Mapping[str, RmsNorm]:
    """Node of a statistic -> its RMSNorm (main graph), found once per context."""
    return ctx.memo(_rms_norms)


def _rms_norms(ctx: ModelContext) -> Mapping[str, RmsNorm]:
    found: dict[str, RmsNorm] = {}
    for ref in ctx.nodes:
        if ref.node.op_type == "ReduceMean" and not ref.graph_path:
            norm = _rms_norm(ctx, ref.node)
            found.update(dict.fromkeys(norm.statistic, norm) if norm is not None else {})
    return found


def _only(ctx: ModelContext, tensor: str, *ops: str) -> onnx.NodeProto | None:
    """The one consumer of ``tensor`` when it is one of ``ops`` and ``tensor`` is no graph output."""
    readers = ctx.index.consumers.get(tensor, ())
    outputs = {o.name for o in ctx.model.graph.output}
    return readers[0].node if len(readers) == 1 and readers[0].node.op_type in ops and tensor not in outputs \
        else None


def _scalar(ctx: ModelContext, name: str) -> float | None:
    tensor = ctx.constants.get(name)
    if tensor is None or math.prod(tensor.dims) != 1:
        return None
    return float(np.asarray(read_array(tensor, ctx.base_dir)).ravel()[0])


def _rms_norm(ctx: ModelContext, mean: onnx.NodeProto) -> RmsNorm | None:
    made = ctx.index.producers.get(mean.input[0])
    square = made.node if made is not None else None
    if square is None or not (
            (square.op_type == "Pow" and _scalar(ctx, square.input[1]) == 2.0)
            or (square.op_type == "Mul" and square.input[0] == square.input[1])):
        return None
    x = square.input[0]
    centred = ctx.index.producers.get(x)
    if centred is not None and centred.node.op_type == "Sub":
        return None  # a LayerNorm's variance (policy.layer_norm writes it with FP32 statistics)
    add = _only(ctx, mean.output[0], "Add")
    eps = None if add is None else next((v for n in add.input if n != mean.output[0]
                                         and (v := _scalar(ctx, n)) is not None), None)
    sqrt = None if add is None or eps is None else _only(ctx, add.output[0], "Sqrt")
    if add is None or eps is None or sqrt is None:
        return None
    after = _only(ctx, sqrt.output[0], "Reciprocal", "Div")
    if after is None:
        return None
    if after.op_type == "Div" and list(after.input) == [x, sqrt.output[0]]:
        return RmsNorm(x, square.name, mean.name, add.name, sqrt.name, None, after.name, eps)
    if after.op_type == "Div" and (after.input[1] != sqrt.output[0] or _scalar(ctx, after.input[0]) != 1.0):
        return None
    normalize = _only(ctx, after.output[0], "Mul")
    if normalize is None or x not in normalize.input:
        return None
    return RmsNorm(x, square.name, mean.name, add.name, sqrt.name, after.name, normalize.name, eps)


@rule("Pow", "Mul", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Div")
def rms_statistics(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """An RMSNorm's statistic: x² passes the 16-bit maximum for |x| past its square root."""
    norm = rms_norms(facts.ctx).get(node.name)
    if norm is None:
        yield skip("not the statistic of an RMSNorm written node by node")
        return
    limit = math.sqrt(facts.low.max)
    yield finding(node, "rms-statistics", OVERFLOW, MEDIUM,
                  f"statistic of the RMSNorm of '{norm.x}' (normalised by '{norm.normalize}'): x² passes "
                  f"{facts.low.max_text} once |x| passes {limit:.4g}, as a residual stream does late in a "
                  f"generation; the statistic stays FP32, as LayerNormalization's stash_type 1 keeps it",
                  confirm(facts, [norm.x], lambda s: s.max_abs > limit), x=norm.x, epsilon=norm.epsilon,
                  square_limit=limit, statistic="/".join(norm.statistic),
                  **range_evidence(facts, "x", norm.x))


# --- residual chains ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResidualChain:
    """The residual stream's Adds in order, each x + f(x) of the one before, from ``start`` (the
    embedding)."""

    start: str
    adds: tuple[str, ...]


def residual_chains(ctx: ModelContext) -> Mapping[str, ResidualChain]:
    """Residual Add -> its chain (main graph; chains of two Adds or more), found once per context."""
    return ctx.memo(_residual_chains)


def _residual_chains(ctx: ModelContext) -> Mapping[str, ResidualChain]:
    order = {ref.name: i for i, ref in enumerate(ctx.nodes)}
    stream: dict[str, str] = {}  # residual Add -> the stream it adds to
    for ref in ctx.nodes:
        node = ref.node
        if node.op_type == "Add" and not ref.graph_path and len(node.input) == 2:
            kept = next((x for x, f in (node.input, node.input[::-1]) if _branches(ctx, x, f, order)), None)
            if kept is not None:
                stream[node.name] = kept
    output = {ref.name: ref.node.output[0] for ref in ctx.nodes if ref.name in stream}
    added = set(output.values())  # what a residual Add makes
    adds_to = {x: add for add, x in stream.items()}  # a stream's tensor -> the residual Add that adds to it
    found: dict[str, ResidualChain] = {}
    for add, x in stream.items():
        if x in added:  # not the first Add of its chain
            continue
        adds = [add]
        while (nxt := adds_to.get(output[adds[-1]])) is not None:
            adds.append(nxt)
        if len(adds) >= 2:
            found.update(dict.fromkeys(adds, ResidualChain(x, tuple(adds))))
    return found


def _branches(ctx: ModelContext, x: str, f: str, order: Mapping[str, int]) -> bool:
    """Whether ``f`` is computed from ``x`` by a branch that reads ``x`` apart from the Add (x + f(x))."""
    if len(ctx.index.consumers.get(x, ())) < 2:
        return False
    start = ctx.index.producers.get(x)
    first = order[start.name] if start is not None else -1
    todo, seen = [f], {f}
    while todo:
        made = ctx.index.producers.get(todo.pop())
        if made is None or order[made.name] <= first:  # only nodes after x's producer can read x
            continue
        for name in made.node.input:
            if name == x:
                return True
            if name and name not in seen:
                seen.add(name)
                todo.append(name)
    return False


@rule("Add")
def residual_chain(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """An Add of the residual stream, layer after layer: its headroom shrinks with depth (measured)."""
    chain = residual_chains(facts.ctx).get(node.name)
    if chain is None:
        yield skip("not an Add of a residual stream of two Adds or more")
        return
    depth = chain.adds.index(node.name) + 1
    evidence = {"depth": depth, "chain_length": len(chain.adds), "stream_from": chain.start,
                **range_evidence(facts, "output", node.output[0])}
    stats = facts.range_of(node.output[0])
    room = ""
    if stats is not None:
        over, _ = facts.low.margins(stats.max_abs, stats.min_nonzero_abs)
        evidence["binades_left"] = over
        room = f": {over:.1f} binade(s) left to {facts.low.max_text} here"
    yield finding(node, "residual-chain", OVERFLOW, LOW,
                  f"residual Add {depth} of {len(chain.adds)} on the stream from '{chain.start}'{room}; the "
                  f"stream grows with depth and with the steps, which the search measures",
                  confirm(facts, [node.output[0]], facts.overflows), **evidence)


# --- softcaps -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Softcap:
    """c·tanh(x / c): ``divide`` (x / c, or x times 1/c), ``tanh``, ``scale`` (times c)."""

    x: str
    divide: str
    tanh: str
    scale: str
    cap: float


def softcaps(ctx: ModelContext) -> Mapping[str, Softcap]:
    """Tanh or scale node -> its softcap, found once per context."""
    return ctx.memo(_softcaps)


def _softcaps(ctx: ModelContext) -> Mapping[str, Softcap]:
    found: dict[str, Softcap] = {}
    for ref in ctx.nodes:
        tanh = ref.node
        if tanh.op_type != "Tanh":
            continue
        made = ctx.index.producers.get(tanh.input[0])
        divide = made.node if made is not None else None
        scale = _only(ctx, tanh.output[0], "Mul")
        if divide is None or scale is None or _only(ctx, divide.output[0], "Tanh") is None:
            continue
        cap = _divisor(ctx, divide)
        times = next((v for n in scale.input if n != tanh.output[0] and (v := _scalar(ctx, n)) is not None),
                     None)
        if cap is not None and times is not None and cap > 0 and abs(times / cap - 1) <= SOFTCAP_MATCH:
            x = next(n for n in divide.input if _scalar(ctx, n) is None)
            cap_found = Softcap(x, divide.name, tanh.name, scale.name, times)
            found.update({tanh.name: cap_found, scale.name: cap_found})
    return found


def _divisor(ctx: ModelContext, node: onnx.NodeProto) -> float | None:
    """c of x / c, or of x * (1/c)."""
    if node.op_type == "Div" and len(node.input) == 2:
        return _scalar(ctx, node.input[1]) if _scalar(ctx, node.input[0]) is None else None
    if node.op_type == "Mul" and len(node.input) == 2:
        scales = [v for n in node.input if (v := _scalar(ctx, n)) is not None]
        return 1.0 / scales[0] if len(scales) == 1 and scales[0] else None
    return None


def saturates_at(cap: float, significand_bits: int) -> float:
    """|x| past which tanh(x / cap) rounds to ±1 in a type of ``significand_bits``: 1 - tanh(z) ≈ 2e^-2z
    falls below half the spacing just below 1, 2^-(bits + 2)."""
    return cap * (significand_bits + 3) * math.log(2) / 2


@rule("Tanh", "Mul")
def softcap(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """c·tanh(x / c): the capped values collapse onto ±c in 16 bits (Tanh and scale kept FP32)."""
    cap = softcaps(facts.ctx).get(node.name)
    if cap is None:
        yield skip("not the Tanh or scale of a softcap c·tanh(x / c)")
        return
    low = facts.low
    limit = saturates_at(cap.cap, low.significand_bits)
    yield finding(node, "softcap", PRECISION, MEDIUM,
                  f"softcap {cap.cap:g}·tanh(x / {cap.cap:g}) of '{cap.x}' (divided by '{cap.divide}'): in "
                  f"{low.name} tanh rounds to ±1 for |x| past {limit:.4g}, so every value beyond is "
                  f"±{cap.cap:g} and their order is lost; '{cap.tanh}' and '{cap.scale}' stay FP32",
                  confirm(facts, [cap.x], lambda s: s.max_abs > limit), cap=cap.cap, capped=cap.x,
                  divide=cap.divide, saturates_at=limit, **range_evidence(facts, "capped", cap.x))


# --- recurrent states ---------------------------------------------------------------------------------

# ops whose output is bounded whatever their input: a state made by one cannot grow
BOUNDED = frozenset({"Tanh", "Sigmoid", "HardSigmoid", "Softsign", "Softmax", "Sin", "Cos", "Clip"})


@dataclass(frozen=True)
class StatePath:
    """The nodes between a state input and the output fed back into it at the next step (model order);
    ``bounded_by``: the bounded ops (Tanh, Sigmoid) that make the output, moved or concatenated, if they
    do (the state cannot grow)."""

    input: str
    output: str
    nodes: tuple[str, ...]
    bounded_by: tuple[str, ...] = ()


def state_paths(ctx: ModelContext, generation: Generation) -> Mapping[str, StatePath]:
    """Node -> the path of a state of ``generation`` it lies on, found once per context and generation."""
    known = ctx.memo(_state_memo)
    # by identity: the rule asks once per node, and hashing a description of many inputs is not free
    kept = known.get(id(generation))
    if kept is None or kept[0] is not generation:
        kept = known[id(generation)] = (generation, _state_paths(ctx, generation))
    return kept[1]


def _state_memo(ctx: ModelContext) -> dict[int, tuple[Generation, Mapping[str, StatePath]]]:
    return {}


def _state_paths(ctx: ModelContext, generation: Generation) -> Mapping[str, StatePath]:
    found: dict[str, StatePath] = {}
    for fed in generation.feedback:
        if fed.kind != "state":
            continue
        after = _reached(fed.input, lambda t: [r.node for r in ctx.index.consumers.get(t, ())], "output")
        before = _reached(fed.output, lambda t: [r.node for r in (ctx.index.producers.get(t),) if r], "input")
        nodes = tuple(ref.name for ref in ctx.nodes if ref.name in after and ref.name in before)
        path = StatePath(fed.input, fed.output, nodes, _bounded_by(ctx, fed.output))
        for name in nodes:
            found.setdefault(name, path)
    return found


def _bounded_by(ctx: ModelContext, tensor: str) -> tuple[str, ...]:
    """The bounded ops whose outputs, moved or concatenated, make ``tensor``; () unless all of it is."""
    made = ctx.index.producers.get(tensor)
    if made is None:
        return ()
    if made.node.op_type in BOUNDED:
        return (made.name,)
    if made.node.op_type not in MOVES:
        return ()
    data = made.node.input[:] if made.node.op_type == "Concat" else made.node.input[:1]
    found = [_bounded_by(ctx, name) for name in data if name]
    return tuple(n for f in found for n in f) if found and all(found) else ()


def _reached(tensor: str, step: Callable[[str], list[onnx.NodeProto]], side: str) -> set[str]:
    """The nodes reached from ``tensor`` by ``step`` (consumers or producers), following each node's
    ``side`` ("output" or "input")."""
    todo, nodes = [tensor], set()
    while todo:
        for node in step(todo.pop()):
            if node.name not in nodes:
                nodes.add(node.name)
                todo.extend(n for n in (node.output if side == "output" else node.input) if n)
    return nodes


@rule(ANY_OP)
def state_path(node: onnx.NodeProto, facts: ModelFacts) -> RuleOutput:
    """A node between a recurrent state input and the output fed back into it at the next step."""
    generation = generation_of(facts)
    path = state_paths(facts.ctx, generation).get(node.name) if generation is not None else None
    if generation is None or path is None:
        yield skip("on no path of a state fed back at the next step")
        return
    if path.bounded_by:
        yield skip(f"state '{path.input}' is made by {'/'.join(path.bounded_by)}: bounded, it cannot grow")
        return
    out = [o for o in node.output if o and facts.is_float(o)]
    yield finding(node, "state-path", OVERFLOW, MEDIUM,
                  f"on the path of state '{path.input}' -> '{path.output}', fed back at each of the "
                  f"{generation.steps} step(s) ({len(path.nodes)} node(s) from the input to the output): "
                  f"what a step adds accumulates, so one pass's range does not bound it; the steps "
                  f"measure it",
                  confirm(facts, out, lambda *s: any(facts.overflows(x) for x in s)) if out else None,
                  state=path.input, fed_from=path.output, path_nodes=len(path.nodes), steps=generation.steps,
                  **(range_evidence(facts, "output", out[0]) if out else {}))


RULES = (mask_sentinel, rotary_positions, rms_statistics, residual_chain, softcap, state_path)
