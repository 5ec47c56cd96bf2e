"""TensorRT command lines for a precision plan: trtexec and Polygraphy.

Two artefacts serve two generations of TensorRT:

* 8.6 - 10.11 (weakly typed): ``--fp16 --precisionConstraints=obey`` with ``--layerPrecisions`` and
  ``--layerOutputTypes`` naming every layer of every FP32 node. Names are the ones onnx-tensorrt
  gives (:mod:`.naming`): a node's first layer is named after it (unnamed nodes
  ``node_of_<first output>``, as the loader names them too), its further layers ``<name>_<k>``
  with a ``k`` no one can predict from the ONNX file alone, so they are pinned with the one pattern
  ``<name>_*``, and only when that pattern cannot reach a layer of any other node. trtexec (9.1 and
  later; 8.6's matches exact names only) takes an exact name first and otherwise the first pattern
  it finds in an unordered map, so patterns that overlap would be resolved arbitrarily: an
  overlapping pattern is never written. Layers that
  onnx-tensorrt never names (``(Unnamed Layer* N) [Type]``) cannot be pinned at all; the file says
  so and points to the Cast-pinned model. Flags are computed for every release and releases with
  the same flags share one line (CumSum, LayerNormalization and output types differ by release).
* 10.12+ deprecates and 11.0 removes those flags: the Cast-pinned model is the artefact, built with
  ``--stronglyTyped`` (always on in 11), so the types written in the model are the types that run.

The shape profile the lines carry for dynamic inputs is :mod:`.profile`'s. A problem with the flags never
stops a conversion: the text says what it could not express. Names are the model's: each word of a
command is quoted by :func:`..render.for_shell`, and every line, the comments that name nodes as
``'name'`` included, is escaped by :func:`..render.shell_script`, so running the file runs its commands
and nothing a name holds.
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from ..float_types import LOW_PRECISIONS, LOW_TYPES
from ..graph import walk_nodes
from ..native_oracles import TENSORRT
from ..plan import Precision, PrecisionPlan
from ..render import shell_script
from ..suggested import RunArgs, quoted
from ..typing_rules import WIDE, elem_type, tensor_types
from .naming import INTERNAL_PREFIXES, LayersCache, NodeNames, trt_layer_names
from .profile import ShapeProfile, graph_inputs, shape_profile, unparseable

# where convert.run and tests/test_trt.py import them from (they live in .profile)
from .profile import check_given_profile as check_given_profile
from .profile import sample_shapes as sample_shapes
from .versions import (
    LAST_WEAKLY_TYPED,
    OUTPUT_TYPES_INT64_BOOL,
    RELEASES,
    TRTEXEC_LOW_TYPES,
    TRTEXEC_PATTERNS,
    TrtVersion,
    span_text,
)

# Constant becomes weights, not a layer; Shape and Size read only metadata, never float values.
_NOT_FLOAT_LAYERS = frozenset({"Constant", "Shape", "Size"})

_TRT_TYPE_NAMES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "fp32",
    **{elem: low.precision for elem, low in LOW_TYPES.items()},  # trtexec spells them as plans do
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.BOOL: "bool",
}

# Polygraphy's names of the types, by the precision a plan (and trtexec) gives them: numpy's, as schemas
_POLYGRAPHY_TYPES = {"fp32": "float32", **{p: low.type_name for p, low in LOW_PRECISIONS.items()}}
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, *LOW_TYPES)
# onnx-tensorrt builds a float64 tensor in float32 (onnx2trt::convertDtype: DOUBLE -> kFLOAT), so a
# float64 node is a float layer that --fp16 may run in FP16: a pin of it is a flag as a float32 node's is
_LAYER_FLOATS = (*WIDE, *LOW_TYPES)

# kSTRONGLY_TYPED exists from TensorRT 9.0 (onnxruntime's TensorRT provider sets it "#if
# NV_TENSORRT_MAJOR > 8"); 10.12 deprecates the weakly typed flags and 11.0 builds only so.
STRONGLY_TYPED_FROM = TrtVersion(9, 0)
STRONGLY_TYPED_HINT = (f"build the Cast-pinned model with --stronglyTyped (TensorRT {STRONGLY_TYPED_FROM} "
                       f"and later) instead")


@dataclass(frozen=True)
class TrtFlags:
    """The weakly typed flags for one TensorRT release: (layer name or pattern, precision),
    (layer name or pattern, output types), I/O formats when the plan has FP16 I/O, and ``problems``:
    what they cannot express, one sentence each."""

    layer_precisions: tuple[tuple[str, str], ...]
    layer_output_types: tuple[tuple[str, tuple[str, ...]], ...]
    problems: tuple[str, ...] = ()
    input_formats: tuple[str, ...] = ()
    output_formats: tuple[str, ...] = ()
    switches: tuple[str, ...] = ("--fp16",)  # the 16-bit types the plan uses: --fp16, --bf16 (9.1+)
    # the nodes the run measured as needing FP32 or BF16 that these flags cannot hold there (a problem
    # above names each): the flags would build another plan than the one measured
    unheld: tuple[str, ...] = ()

    @property
    def unmeasured(self) -> bool:
        """Whether these flags cannot build the plan measured."""
        return bool(self.unheld)

    def weakly_typed_args(self) -> list[str]:
        args = list(self.switches)
        if self.layer_precisions:
            args += ["--precisionConstraints=obey",
                     "--layerPrecisions=" + ",".join(f"{n}:{p}" for n, p in self.layer_precisions)]
            if self.layer_output_types:
                args.append("--layerOutputTypes=" + ",".join(f"{n}:{'+'.join(t)}"
                                                            for n, t in self.layer_output_types))
        if self.input_formats:
            args.append("--inputIOFormats=" + ",".join(self.input_formats))
        if self.output_formats:
            args.append("--outputIOFormats=" + ",".join(self.output_formats))
        return args


def _computes_on_floats(node: onnx.NodeProto, types: Mapping[str, int | None]) -> bool:
    return any(types.get(t) in _LAYER_FLOATS for t in list(node.input) + list(node.output) if t)


def _output_type_name(elem: int | None, precision: str = "fp32") -> str:
    # A float output of a constrained layer has the layer's precision by definition of the
    # constraint; other outputs keep their own type so the constraint list stays complete.
    if elem is None or elem in _FLOAT_TYPES:
        return precision
    return _TRT_TYPE_NAMES.get(elem, "fp32")


def _io_format(elem: int | None, version: TrtVersion, io_type: str = "fp16") -> str | None:
    """trtexec's I/O format for an input or output under --fp16-io, whose float I/O is ``io_type``
    (None: that trtexec has no name for the type)."""
    if elem in _FLOAT_TYPES:
        return f"{io_type}:chw"
    if version not in OUTPUT_TYPES_INT64_BOOL:
        if elem == onnx.TensorProto.INT64:
            return "int32:chw"  # 8.6's parser turns INT64 I/O into INT32
        if elem in (onnx.TensorProto.BOOL, onnx.TensorProto.UINT8):
            return None
    return f"{_TRT_TYPE_NAMES.get(elem or 0, 'fp32')}:chw"


class _Model:
    """What every release's flags are computed from: node types and the plan's FP32 float nodes."""

    def __init__(self, model: onnx.ModelProto, plan: PrecisionPlan, renamed: Sequence[tuple[str, str]],
                 types: Mapping[str, onnx.TypeProto] | None = None) -> None:
        self.model = model
        self.plan = plan
        inferred = tensor_types(model) if types is None else types
        self.types = {name: elem_type(tp) for name, tp in inferred.items()}
        self.nodes = {ref.node.name: ref.node for ref in walk_nodes(model.graph)}
        self.originals = {new: old for old, new in renamed}
        self.layers: LayersCache = {}
        self.lows = frozenset(d.precision for d in plan.decisions.values() if d.precision.is_low)
        # the 16-bit types a mixed plan (--fallback) holds its layers to: all but its first, which the
        # build's own switch gives every unconstrained layer
        self.held = tuple(p for p in Precision if p in self.lows)[1:]
        # the type of 16-bit I/O: the plan's one 16-bit type, its first where it has several (FP16 where none)
        self.io = next((p for p in Precision if p in self.lows), Precision.FP16)

    def pinned(self, name: str) -> bool:
        return self.constrained(name) == "fp32"

    def constrained(self, name: str) -> str | None:
        """The precision the flags must hold the node's layers to: "fp32" for a pin, "bf16" for a BF16
        node of a plan that also has FP16 nodes (a BF16-only plan is --bf16 alone; :attr:`held`), None
        for the others and for nodes that are no float layer."""
        node = self.nodes[name]
        decision = self.plan.decisions.get(name)
        if decision is None or node.op_type in _NOT_FLOAT_LAYERS or not _computes_on_floats(node, self.types):
            return None
        if decision.precision is Precision.FP32:
            return "fp32"
        return decision.precision.value if decision.precision in self.held else None


class _Others:
    """The named layers of the nodes that are not pinned, sorted, to find what a pattern reaches."""

    def __init__(self, names: Sequence[NodeNames], pinned: set[str]) -> None:
        layers = sorted((layer, n.base) for n in names if n.node not in pinned for layer in n.named)
        self.layers = [layer for layer, _ in layers]
        self.bases = [base for _, base in layers]

    def clash(self, base: str) -> list[str]:
        """What the pattern ``<base>_*`` would reach besides the pinned nodes called ``base``: layers
        of other nodes, and the parser's own internal names."""
        prefix = base + "_"
        reached = []
        i = bisect.bisect_left(self.layers, prefix)
        while i < len(self.layers) and self.layers[i].startswith(prefix):
            reached.append(f"'{self.layers[i]}' of node '{self.bases[i]}'")
            i += 1
        reached += [f"the parser's '{p}*' layers" for p in INTERNAL_PREFIXES if p.startswith(prefix)]
        return reached


def _flags(m: _Model, version: TrtVersion) -> tuple[TrtFlags, list[NodeNames]]:
    names = trt_layer_names(m.model, version, original_names=m.originals, cache=m.layers)
    constrained = {precision: [n for n in names if m.constrained(n.node) == precision]
                   for precision in ("fp32", *(p.value for p in m.held))}
    others = _Others(names, {n.node for group in constrained.values() for n in group})
    layers = _LayerConstraints(m, version, others)
    known = [p for p in Precision if p in m.lows and version in TRTEXEC_LOW_TYPES[p.value]]
    for p in sorted(m.lows - set(known), key=list(Precision).index):
        layers.problems.append(f"the {len(m.plan.nodes_in(p))} {p.name} node(s): trtexec before "
                               f"{TRTEXEC_LOW_TYPES[p.value].first} has no {p.value}; {STRONGLY_TYPED_HINT}")
        layers.unheld += m.plan.nodes_in(p)
    for precision, group in constrained.items():
        for n in group if precision == "fp32" or Precision(precision) in known else ():
            layers.constrain(n, precision)
    for p in m.held:
        if p in known and m.io in known:
            layers.problems.append(f"the {m.io.name} layers: with --{p.value} on, TensorRT may run an "
                                   f"unconstrained layer in {p.name} rather than {m.io.name}; "
                                   f"{STRONGLY_TYPED_HINT}")
    precisions, output_types, problems = layers.precisions, layers.output_types, layers.problems
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    if m.plan.fp16_io:
        io_type = m.io.value
        ins = [_io_format(m.types.get(vi.name), version, io_type) for vi in graph_inputs(m.model)]
        outs = [_io_format(m.types.get(vi.name), version, io_type) for vi in m.model.graph.output]
        if None in ins or None in outs:
            problems.append("the I/O formats: trtexec before 9.1 has no name for bool or uint8 I/O, so "
                            "--inputIOFormats/--outputIOFormats are left out (the engine keeps FP32 I/O)")
        else:
            inputs, outputs = tuple(f for f in ins if f), tuple(f for f in outs if f)
    switches = tuple(f"--{p.value}" for p in known) or ("--fp16",)
    flags = TrtFlags(tuple(precisions), tuple(output_types), tuple(dict.fromkeys(problems)), inputs, outputs,
                     switches, tuple(dict.fromkeys(layers.unheld)))
    return flags, names


class _LayerConstraints:
    """The --layerPrecisions and --layerOutputTypes entries of one release, node by node, and what
    they cannot express."""

    def __init__(self, m: _Model, version: TrtVersion, others: _Others) -> None:
        self.m = m
        self.version = version
        self.others = others
        self.precisions: list[tuple[str, str]] = []
        self.output_types: list[tuple[str, tuple[str, ...]]] = []
        self.problems: list[str] = []
        self.unheld: list[str] = []  # the constrained nodes some layer of which the entries miss
        self.patterns: set[str] = set()

    def _unheld(self, n: NodeNames, problem: str) -> None:
        self.problems.append(problem)
        self.unheld.append(n.node)

    def constrain(self, n: NodeNames, precision: str) -> None:
        """The entries that keep node ``n``'s layers in ``precision`` ("fp32", "bf16")."""
        m, version = self.m, self.version
        node = m.nodes[n.node]
        what = f"node '{n.base}' ({n.op_type})"
        bad = unparseable(n.base)
        if bad:
            self._unheld(n, f"{what} cannot be named in trtexec's flags: {bad}; rename it in the model, "
                                 f"or {STRONGLY_TYPED_HINT}")
            return
        if not n.named:
            if n.unreachable:
                self._unheld(n, f"{what}: onnx-tensorrt names none of its layers after it, so no flag "
                                     f"can pin it; {STRONGLY_TYPED_HINT}")
            return
        if n.base in n.named:
            self.precisions.append((n.base, precision))
            only_layer = len(n.layers) == 1
            out = (tuple(_output_type_name(m.types.get(o), precision) for o in node.output if o)
                   if only_layer else (precision,))
            if version not in OUTPUT_TYPES_INT64_BOOL and any(t in ("int64", "bool") for t in out):
                self.problems.append(f"{what}: trtexec before 9.1 rejects int64 and bool in "
                                     f"--layerOutputTypes, so its output types are left to TensorRT")
            else:
                self.output_types.append((n.base, out))
        extra = [name for name in n.named if name != n.base]
        if extra and version not in TRTEXEC_PATTERNS:
            self._unheld(n, f"{what}: trtexec before 9.1 matches layer names exactly (no patterns), so "
                                 f"its layers {', '.join(extra)} cannot be named; {STRONGLY_TYPED_HINT}")
        elif extra and n.base not in self.patterns:
            clash = self.others.clash(n.base)
            if clash:
                self._unheld(n, f"{what}: its layers {', '.join(extra)} need the pattern '{n.base}_*', "
                                     f"which would also pin {', '.join(clash)}; rename the node, or "
                                     f"{STRONGLY_TYPED_HINT}")
            else:
                self.patterns.add(n.base)
                self.precisions.append((f"{n.base}_*", precision))
                if all(layer.float_output for layer, name in n.layers if name in extra):
                    self.output_types.append((f"{n.base}_*", (precision,)))
        if n.unreachable:
            kinds = ", ".join(layer.kind for layer in n.unreachable)
            self._unheld(n, f"{what}: onnx-tensorrt gives its {kinds} layer(s) no name (TensorRT calls "
                                 f"them '(Unnamed Layer* N) [...]'), so no flag can keep them out of FP16; "
                                 f"{STRONGLY_TYPED_HINT}")


def trt_flags(model: onnx.ModelProto, plan: PrecisionPlan, *, version: TrtVersion = LAST_WEAKLY_TYPED,
              renamed: Sequence[tuple[str, str]] = ()) -> TrtFlags:
    """Flags pinning the layers of the plan's FP32 nodes that TensorRT ``version`` builds from
    them, for the original model. ``renamed`` is the loader's (old, new) node renames
    (:attr:`..context.ModelContext.renamed`): onnx-tensorrt names layers after the names in the
    file, duplicates included.

    Integer-only nodes (shape arithmetic) and Constant nodes are left out: they are not float
    layers, and naming them would only make trtexec warn about unknown layers.
    """
    return _flags(_Model(model, plan, renamed), version)[0]


@dataclass(frozen=True)
class ReleaseFlags:
    releases: tuple[TrtVersion, ...]
    flags: TrtFlags


@dataclass(frozen=True)
class FlagsByRelease:
    """The weakly typed flags of every release from 8.6 to 10.11, consecutive releases with the same
    flags grouped; the layer names of the last one and the pinned nodes (for Polygraphy)."""

    groups: tuple[ReleaseFlags, ...]
    names: tuple[NodeNames, ...]
    pinned: frozenset[str]
    model: _Model


def flags_by_release(model: onnx.ModelProto, plan: PrecisionPlan, *, renamed: Sequence[tuple[str, str]] = (),
                     types: Mapping[str, onnx.TypeProto] | None = None) -> FlagsByRelease:
    """The flags of every release in :data:`RELEASES`, releases with the same flags grouped
    (``types``: every value's type, when the caller has them; inferred otherwise)."""
    m = _Model(model, plan, renamed, types)
    groups: list[ReleaseFlags] = []
    names: list[NodeNames] = []
    for version in RELEASES:
        flags, names = _flags(m, version)
        if groups and groups[-1].flags == flags:
            groups[-1] = ReleaseFlags(groups[-1].releases + (version,), flags)
        else:
            groups.append(ReleaseFlags((version,), flags))
    pinned = frozenset(n.node for n in names if m.pinned(n.node))
    return FlagsByRelease(tuple(groups), tuple(names), pinned, m)


def _engine_path(model_path: str) -> str:
    return os.path.splitext(model_path)[0] + ".engine"


def strongly_typed_build(model: onnx.ModelProto, run: RunArgs) -> tuple[list[str], ShapeProfile]:
    """trtexec's strongly typed build of the written model, with the shape profile of ``model``'s dynamic
    inputs (given, else the run's sample shapes); the profile's problems say what it could not give."""
    profile = shape_profile(model, run.shapes(), run.trt_profile)
    return ["trtexec", f"--onnx={run.output_path}", "--stronglyTyped", *profile.trtexec_args()], profile


def _listed(nodes: Sequence[str], m: _Model, most: int = 5) -> str:
    """"'a' (FP32), 'b' (BF16)", the first ``most`` of ``nodes`` with the precision the plan measured."""
    named = [f"'{n}' ({m.plan.decisions[n].precision.value.upper()})" for n in nodes[:most]]
    return ", ".join(named) + (f" and {len(nodes) - most} more" if len(nodes) > most else "")


def _not_the_plan(line: str, unheld: Sequence[str], m: _Model, where: str, instead: str) -> list[str]:
    """``line`` shown, not offered, when its flags cannot hold ``unheld`` as measured (``where``: whose
    flags; ``instead``: what builds the plan measured there)."""
    return [f"# (not the plan measured) {line}",
            f"#   no runnable line {where}: its flags cannot hold {_listed(unheld, m)}, so TensorRT would "
            f"build another plan than the one measured; {instead}"]


def _instead(group: ReleaseFlags, later: Sequence[ReleaseFlags]) -> str:
    """What builds the plan measured where the flags of ``group``'s releases cannot: the strongly typed
    model (from 9.0), or the flags of a later range that can."""
    held = next((g for g in later if not g.flags.unmeasured), None)
    also = f" or the flags of TensorRT {span_text(list(held.releases))} (their line below)" if held else ""
    return (f"the plan measured is built by the strongly typed line below (TensorRT {STRONGLY_TYPED_FROM} "
            f"and later){also}")


def _polygraphy_lines(names: Sequence[NodeNames], m: _Model, profile: ShapeProfile, run: RunArgs,
                      target_args: Sequence[str], fp16_io: bool, io_names: list[str]) -> list[str]:
    exact, unnamed_extra, unheld = [], [], []
    for n in names:
        constrained = m.constrained(n.node)
        if constrained is None:
            continue
        if n.base in n.named:
            exact.append(f"{n.base}:{_POLYGRAPHY_TYPES[constrained]}")
        if any(name != n.base for name in n.named):
            unnamed_extra.append(n.base)
        if n.unreachable or any(name != n.base for name in n.named):
            unheld.append(n.node)
    constraints = [f"--{p.value}" for p in Precision if p in m.lows] or ["--fp16"]
    if exact:
        constraints += ["--precision-constraints", "obey", "--layer-precisions", *exact]
    header = (f"# Polygraphy: the same pins by exact layer name (it has no patterns; names as TensorRT "
              f"{LAST_WEAKLY_TYPED} gives them):")
    lines = [header]
    if unnamed_extra:
        lines.append(f"#   not expressed: the layers <name>_<k> of {', '.join(unnamed_extra)} (the "
                     f"--strongly-typed "
                     f"line below pins them)")
    io_type = _POLYGRAPHY_TYPES[m.io.value]
    io = ["--tensor-datatypes", *(f"{name}:{io_type}" for name in io_names)] if fp16_io and io_names else []
    pinned = quoted(["polygraphy", "convert", run.model_path, *constraints, *io, *profile.polygraphy_args(),
                     "-o", _engine_path(run.model_path)])
    lines += (_not_the_plan(pinned, unheld, m, "by layer name", "the plan measured is built by the "
                                                                "--strongly-typed line below")
              if unheld else [pinned])
    lines.append(quoted(["polygraphy", "convert", run.output_path, "--strongly-typed",
                         *profile.polygraphy_args(),
                         "-o", _engine_path(run.output_path)]))
    return lines + _check_lines(run, target_args, constraints, profile, bool(unheld))


def _check_lines(run: RunArgs, target_args: Sequence[str], constraints: Sequence[str], profile: ShapeProfile,
                 unheld: bool) -> list[str]:
    """How to check an engine by the run's own verdict, and what Polygraphy's own check can say of it
    (shown, not offered, when its pins cannot build the plan measured: ``unheld``)."""
    tol = run.tolerance
    lines = [f"# Check the written model built by TensorRT with the verdict the conversion used "
             f"({tol.describe()}), through onnxruntime's {TENSORRT.title} provider:",
             quoted(run.check_args(target_args, TENSORRT.name))]
    if tol.error_stat != "rms" or tol.per_output:
        return lines + [f"# Polygraphy has no check that agrees with this one: its {tol.error_stat} "
                        f"check passes an element (elemwise) or an output (max, mean, median, quantile) "
                        f"within atol OR within rtol of each element, where this verdict bounds atol + "
                        f"rtol x |ref| (elemwise) or atol + rtol x max|ref| and the cosine; use the line "
                        f"above."]
    snr = -20 * math.log10(tol.max_rel_rms) if tol.max_rel_rms > 0 else math.inf
    # onnxruntime first: Polygraphy takes the first runner's output as the signal
    compare = quoted(["polygraphy", "run", run.model_path, "--onnxrt", "--trt", *constraints,
                      *profile.polygraphy_args(run=True), "--compare", "snr", "--snr-threshold",
                      f"{snr:.2f}"])
    return lines + [
        f"# Polygraphy's closest check: SNR >= {snr:.2f} dB is rel RMS err <= {tol.max_rel_rms:g} over "
        f"each whole output; it has no per-slice bound (every slice <= {tol.max_slice_rel_rms:g}) and no "
        f"pass by all |err| <= atol {tol.atol:g}, so where those decide it can disagree with the verdict "
        f"(its default, elementwise atol/rtol, fails engines that match the emulation):",
        f"# (not the plan measured: its pins are the line above it) {compare}" if unheld else compare]


def trt_flags_text(model: onnx.ModelProto, plan: PrecisionPlan, run: RunArgs, target_args: Sequence[str] = (),
                   *, renamed: Sequence[tuple[str, str]] = (),
                   types: Mapping[str, onnx.TypeProto] | None = None) -> str:
    """The --trt-flags file: trtexec lines per TensorRT generation (and per release where the flags
    differ), each with a comment saying which releases it is for, then the Polygraphy equivalents.
    ``run`` holds the paths, the shapes the dynamic inputs' min/opt/max come from and the verdict the
    check lines repeat (``target_args``: the target's options for them). A release range whose flags
    cannot hold the plan measured gets no runnable line: it says why, and what builds the plan there."""
    by_release = flags_by_release(model, plan, renamed=renamed, types=types)
    strongly_typed, shape_range = strongly_typed_build(model, run)
    shapes = shape_range.trtexec_args()
    held = "".join(f" and {len(plan.nodes_in(p))} in {p.name}" for p in by_release.model.held)
    lines = [f"# onnx-precision: TensorRT flags for {len(by_release.pinned)} node(s) pinned to FP32{held}."]
    lines += shape_range.comment()
    groups = by_release.groups
    for i, group in enumerate(groups):
        span = span_text(list(group.releases))
        lines.append(f"# TensorRT {span} (weakly typed; these flags are deprecated in 10.12 and removed in "
                     f"11.0).")
        if i == 0:
            lines.append("# Layers are named as onnx-tensorrt names them (the node's name, then "
                         "<name>_<k>), so the "
                         "flags apply to the original FP32 model:")
        line = quoted(["trtexec", f"--onnx={run.model_path}", *group.flags.weakly_typed_args(), *shapes])
        lines += (_not_the_plan(line, group.flags.unheld, by_release.model, f"for TensorRT {span}",
                                _instead(group, groups[i + 1:])) if group.flags.unmeasured else [line])
        lines += [f"#   not expressed: {p}" for p in group.flags.problems]
    lines.append(f"# TensorRT {STRONGLY_TYPED_FROM} and later, strongly typed (the way from 10.12, the only "
                 f"one in 11.x): build the Cast-pinned model as written:")
    lines.append(quoted(strongly_typed))
    lines += [f"#   not expressed: {p}" for p in shape_range.problems]
    io_names = [vi.name for vi in graph_inputs(model) + list(model.graph.output)
                if vi.type.tensor_type.elem_type in _FLOAT_TYPES]
    lines += _polygraphy_lines(by_release.names, by_release.model, shape_range, run, target_args,
                               plan.fp16_io, io_names)
    return shell_script(lines)  # the comments quote names: none may end its line
