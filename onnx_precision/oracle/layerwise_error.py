"""Layerwise error: per node, the error of the plan's output against FP32 (scale-relative, as in
:mod:`onnx_precision.judge.compare`), the *first-divergence* nodes, where an error appears, and the nodes
whose output shape parts from FP32's with the decisions upstream that flipped (:class:`ShapeChange`).
:mod:`.inspection` measures them."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ..format import json_float
from .twin import is_decision


@dataclass(frozen=True)
class NodeError:
    """A node's emulated FP16 output against FP32 (worst case over its outputs and the samples)."""

    node: str
    op_type: str
    max_abs_err: float
    max_rel_err: float      # max |err| / max |FP32 value|
    new_nonfinite: int      # NaN/Inf where FP32 is finite
    input_rel_err: float    # the worst max_rel_err among its inputs (0 for graph inputs, constants)
    diverges: bool          # the error appears here (see module docstring)
    reshaped: bool = False  # an output's shape differs from FP32's (its errors are then inf)

    def to_json(self) -> dict:
        return {"node": self.node, "op_type": self.op_type, "max_abs_err": json_float(self.max_abs_err),
                "max_rel_err": json_float(self.max_rel_err), "new_nonfinite": self.new_nonfinite,
                "input_rel_err": json_float(self.input_rel_err), "diverges": self.diverges,
                "reshaped": self.reshaped}


@dataclass(frozen=True)
class ShapeChange:
    """The first node whose output shape differs between FP32 and the plan (its float inputs' shapes
    agree), and the decisions upstream that flipped: each one's float inputs within tolerance, its
    output (where it is a float tensor) not."""

    node: str
    op_type: str
    sample: int
    decisions: tuple[tuple[str, str], ...]  # (node, op type), nearest first; () where none was found
    feeding: tuple[str, ...]                # the nodes upstream of those decisions, nearest first
    # onnxruntime's error where the plan's run stopped on the shapes that differ, which no node was then
    # seen to have (``node`` is the first decision that flipped: blame.Decisions); "" where it ran
    stopped: str = ""

    def describe(self) -> str:
        flipped = ", ".join(f"'{name}' ({op})" for name, op in self.decisions)
        if self.stopped:
            return (f"the 16-bit run stops on sample {self.sample} where shapes differ from FP32's "
                    f"(onnxruntime: {self.stopped}): the decision of {flipped} flipped")
        where = (f"the output shape of node '{self.node}' ({self.op_type}) differs from FP32's on sample "
                 f"{self.sample}")
        if not self.decisions:
            return f"{where}; no rounding, comparison or index choice upstream was found to have flipped"
        return f"{where}: the decision of {flipped} flipped, its inputs within tolerance"


@dataclass(frozen=True)
class LayerwiseResult:
    nodes: Mapping[str, NodeError]          # main-graph nodes with float outputs, topological order
    first_divergence: tuple[str, ...]       # nodes where error appears, topological order
    oracle: str = "emulate"
    outputs: tuple[dict[str, np.ndarray], ...] = ()  # the plan's graph outputs, per sample
    shape_changes: tuple[ShapeChange, ...] = ()     # where the plan's shapes part from FP32's

    def ranked(self) -> tuple[str, ...]:
        """Node names by decreasing error (non-finite first), after the nodes feeding a decision that
        changed a shape (nearest first: any error on that chain can flip it): the search's widening order."""
        def badness(name: str) -> tuple[int, float]:
            return -self.nodes[name].new_nonfinite, -self.nodes[name].max_rel_err
        feeding = [n for change in self.shape_changes for n in change.feeding]
        return tuple(dict.fromkeys(feeding + sorted(self.nodes, key=badness)))


@dataclass(frozen=True)
class TensorError:
    abs_err: float
    rel_err: float
    new_nonfinite: int
    cand_nonfinite: bool
    reshaped: bool = False

    def within(self, threshold: float) -> bool:
        return not (self.reshaped or self.new_nonfinite) and self.rel_err <= threshold


CLOSE = TensorError(0.0, 0.0, 0, False)
# the plan's tensor has another shape than FP32's: no elementwise error exists, and none is bounded
RESHAPED = TensorError(float("inf"), float("inf"), 0, False, reshaped=True)


def tensor_error(ref: np.ndarray, cand: np.ndarray) -> TensorError:
    if np.shape(ref) != np.shape(cand):
        return RESHAPED
    finite = np.isfinite(ref)
    all_finite = bool(finite.all())
    r = ref if all_finite else ref[finite]
    c = cand if all_finite else cand[finite]
    c_finite = np.isfinite(c)
    new_nonfinite = int(c.size - np.count_nonzero(c_finite))
    if new_nonfinite:
        r, c = r[c_finite], c[c_finite]
    if not r.size:
        return TensorError(0.0, 0.0, new_nonfinite, not bool(np.isfinite(cand).all()))
    # float32, as the twin graph's Sub computes it (the float64 difference, rounded once)
    err = float(np.float32(np.max(np.abs(c.astype(np.float64) - r))))
    scale = float(np.max(np.abs(r)))
    rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
    return TensorError(err, rel, new_nonfinite, bool(new_nonfinite) or not bool(np.isfinite(cand).all()))


def merge_errors(acc: dict[str, NodeError], nodes: Sequence[onnx.NodeProto],
                  tensor_err: Mapping[str, TensorError], threshold: float) -> None:
    for node in nodes:
        outs = [tensor_err[o] for o in node.output if o in tensor_err]
        if not outs:
            continue
        ins = [tensor_err.get(i, CLOSE) for i in node.input if i]
        # An input already non-finite carries unbounded error, whatever its finite part says.
        in_rel = max((float("inf") if e.new_nonfinite else e.rel_err for e in ins), default=0.0)
        in_bad = any(e.cand_nonfinite for e in ins)
        new_nf = sum(e.new_nonfinite for e in outs)
        rel = max(e.rel_err for e in outs)
        reshaped = any(e.reshaped for e in outs)
        # Inf/NaN made from finite inputs is where an overflow happens, however far upstream
        # error had already moved those inputs; a finite error only counts where it appears. A shape
        # that differs is a flipped decision's doing (see changed_shapes).
        diverges = not (in_bad or reshaped) and (new_nf > 0 or (rel > threshold and in_rel <= threshold))
        err = NodeError(node.name, node.op_type, max(e.abs_err for e in outs), rel, new_nf, in_rel, diverges,
                        reshaped)
        old = acc.get(node.name)
        if old is not None:
            err = NodeError(node.name, node.op_type, max(old.max_abs_err, err.max_abs_err),
                            max(old.max_rel_err, err.max_rel_err), max(old.new_nonfinite, err.new_nonfinite),
                            max(old.input_rel_err, err.input_rel_err), old.diverges or err.diverges,
                            old.reshaped or err.reshaped)
        acc[node.name] = err


def changed_shapes(nodes: Sequence[onnx.NodeProto], producers: Mapping[str, onnx.NodeProto],
                   tensor_err: Mapping[str, TensorError], threshold: float, sample: int,
                   ) -> list[ShapeChange]:
    """The nodes of one sample whose output shape differs from FP32's while their float inputs' shapes
    agree, each with the decisions that flipped upstream (:func:`_flipped`)."""
    changes = []
    for node in nodes:
        if any(tensor_err[o].reshaped for o in node.output if o in tensor_err) and not any(
                tensor_err[i].reshaped for i in node.input if i in tensor_err):
            decisions, feeding = _flipped(node, producers, tensor_err, threshold)
            changes.append(ShapeChange(node.name, node.op_type, sample, decisions, feeding))
    return changes


def _flipped(start: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto],
             tensor_err: Mapping[str, TensorError], threshold: float,
             ) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """The decisions upstream of ``start`` (breadth-first, nearest first) whose float inputs are within
    ``threshold`` and whose float output, where there is one, is not: where the plan's values part from
    FP32's by a whole unit. Past a decision whose inputs already differ the walk goes on up; a decision
    whose output agrees ends its path. With none found, the nearest decision. Also the nodes upstream of
    the decisions, nearest first."""
    found: list[onnx.NodeProto] = []
    nearest: onnx.NodeProto | None = None
    seen = {start.name}
    queue = deque(producers[i] for i in start.input if i in producers)
    while queue:
        node = queue.popleft()
        if node.name in seen:
            continue
        seen.add(node.name)
        if is_decision(node):
            nearest = nearest or node
            ins = [tensor_err[i] for i in node.input if i in tensor_err]
            outs = [tensor_err[o] for o in node.output if o in tensor_err]
            if ins and all(e.within(threshold) for e in ins):
                if not outs or not all(e.within(threshold) for e in outs):
                    found.append(node)
                continue
        queue.extend(producers[i] for i in node.input if i in producers)
    decisions = found or ([nearest] if nearest is not None else [])
    feeding: dict[str, None] = {}
    queue = deque(decisions)
    while queue:
        node = queue.popleft()
        for i in node.input:
            if i in producers and producers[i].name not in feeding:
                feeding[producers[i].name] = None
                queue.append(producers[i])
    return tuple((d.name, d.op_type) for d in decisions), tuple(feeding)
