"""Which bodies of a model's control flow its samples run: an If branch no sample takes, a Loop body no sample
enters. What such a body computes is converted like the rest of the model, but no comparison ever saw it,
so a run says which bodies those are, as it says which pins it did not try alone.

A body is known to run, or not, where what decides it folds from the feed: :func:`.inferred_shapes.infer`
folds an If's condition, a Loop's trip count and first condition from the inputs' shapes and their small
integer and boolean values (a sample rate, a flag, an exporter's "if the state is empty"), as the FLOP
estimate reads them. A condition computed from float data does not fold: such an If is taken to run both
ways, so a branch of it that no sample takes goes unsaid.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from .graph import has_subgraphs, subgraphs, walk_nodes
from .inferred_shapes import infer
from .plan import Precision
from .typing_rules.inference import SMALL_CONSTANT

SHOWN = 3  # bodies named in the note; the rest counted

# A body's kind in words: an If's branches by their attribute's name, any other body as its op's
_BRANCHES = ("then_branch", "else_branch")


@dataclass(frozen=True)
class Unrun:
    """A body no sample runs: its owner (an If, Loop or Scan node), the owner's op, the body's attribute
    (``then_branch``, ``else_branch``, ``body``) and every node inside it, nested bodies' included."""

    owner: str
    op: str
    body: str
    nodes: tuple[str, ...]

    def text(self, precisions: Mapping[str, Precision]) -> str:
        """"the else_branch of If 'branch' (1 node, 1 FP16)": the body, its nodes and how many compute in 16
        bits (``precisions``: each node that computes in a float type, in the precision it computes in)."""
        lows = Counter(p.name for n in self.nodes if (p := precisions.get(n)) is not None and p.is_low)
        counts = "".join(f", {n} {name}" for name, n in sorted(lows.items()))
        plural = "s" if len(self.nodes) != 1 else ""
        return f"the {self.body} of {self.op} '{self.owner}' ({len(self.nodes)} node{plural}{counts})"


def unrun_bodies(model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]]) -> tuple[Unrun, ...]:
    """The bodies of ``model``'s control flow that none of ``feeds`` runs, known as the module docstring says;
    a body inside one of them is not listed apart (its nodes are the outer body's). () for a model without
    control flow, or no feeds."""
    if not feeds or not any(has_subgraphs(ref.node) for ref in walk_nodes(model.graph)):
        return ()
    met: dict[tuple[str, str], onnx.NodeProto] = {}  # each body whose owner a sample reaches
    ran: set[tuple[str, str]] = set()
    done = set()
    for feed in feeds:
        key = _key(feed)
        if key in done:  # the same shapes and small values fold alike
            continue
        done.add(key)
        values = infer(model, {name: np.shape(v) for name, v in feed.items()}, feed).values
        _visit(model.graph, values, met, ran)
    return tuple(Unrun(node.name, node.op_type, body, _names(node, body))
                 for (owner, body), node in met.items() if (owner, body) not in ran)


def unrun_note(bodies: Sequence[Unrun], precisions: Mapping[str, Precision]) -> str:
    """The note a run gives of ``bodies`` (:func:`unrun_bodies`): which, what each holds (``precisions``, as
    :meth:`Unrun.text` reads it), and that nothing verified what they compute; "" where there are none."""
    if not bodies:
        return ""
    listed = ", ".join(b.text(precisions) for b in bodies[:SHOWN])
    more = f", and {len(bodies) - SHOWN} more" if len(bodies) > SHOWN else ""
    if len(bodies) == 1:
        return (f"no sample runs {listed}: converted, but nothing verified it; give samples that run it "
                f"(--inputs)")
    return (f"no sample runs {len(bodies)} bodies of the model's control flow: {listed}{more}: converted, "
            f"but nothing verified them; give samples that run them (--inputs)")


def _visit(graph: onnx.GraphProto, values: Mapping[str, np.ndarray],
           met: dict[tuple[str, str], onnx.NodeProto], ran: set[tuple[str, str]]) -> None:
    """Note each body of ``graph``'s nodes as met, and as run where ``values`` do not rule it out; go into
    those that run."""
    for node in graph.node:
        for body, g in subgraphs(node):
            met.setdefault((node.name, body), node)
            if _runs(node, body, values):
                ran.add((node.name, body))
                _visit(g, values, met, ran)


def _runs(node: onnx.NodeProto, body: str, values: Mapping[str, np.ndarray]) -> bool:
    """Whether ``node``'s ``body`` may run: False only where a folded value says it does not (an If's
    condition picks the other branch; a Loop's trip count is 0 or its first condition false)."""
    def known(i: int) -> np.ndarray | None:
        value = values.get(node.input[i]) if len(node.input) > i and node.input[i] else None
        return value if value is not None and value.size == 1 else None

    if node.op_type == "If" and body in _BRANCHES:
        condition = known(0)
        return condition is None or _BRANCHES[0 if bool(condition.reshape(())) else 1] == body
    if node.op_type == "Loop":
        trips, first = known(0), known(1)
        return not ((trips is not None and int(trips.reshape(())) <= 0)
                    or (first is not None and not bool(first.reshape(()))))
    return True


def _names(node: onnx.NodeProto, body: str) -> tuple[str, ...]:
    graph = next(g for name, g in subgraphs(node) if name == body)
    return tuple(ref.name for ref in walk_nodes(graph))


def _key(feed: Mapping[str, np.ndarray]) -> tuple:
    """What :func:`.inferred_shapes.infer` reads of a feed: each input's shape, and the values of its small
    integer and boolean ones."""
    return tuple(sorted((name, np.shape(v), np.asarray(v).tobytes() if np.asarray(v).dtype.kind in "biu"
                         and np.size(v) <= SMALL_CONSTANT else b"") for name, v in feed.items()))
