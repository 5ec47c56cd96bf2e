"""Does the written model load in onnxruntime as the user will load it, with default options?

The oracle's sessions disable graph optimisations (see :mod:`.sessions`), so a model can pass
every check and still crash onnxruntime at its default level: an optimiser (NchwcTransformer on
some TorchScript transformers) segfaults on it. :func:`default_load_problem` loads the written
file in a child process, where a crash cannot take the run with it, with default session options
(the user's custom-op libraries registered); when that fails it tries the usual workarounds, each
in its own child, and names the first that loads. :class:`DefaultLoad` starts the first child at
once, so the load runs while the caller verifies the model (on the 26 401-node LayerNorm stack the
child takes 5 s, as long as half the verification). A model converted in memory is handed to the
child serialized, on its standard input, as ``InferenceSession(bytes)`` loads it. A child never
outlives this process: it is killed when the caller stops waiting for it (an error, Ctrl-C, a
signal), and it ends itself when this process dies however it dies (SIGKILL, the OOM killer): it
watches a pipe only this process holds open (:data:`_LIFELINE`). The children are forked by this
process's :mod:`.forkserver`, which has imported onnxruntime once (0.02-0.05 s of CPU a load, where a
fresh interpreter importing it cost 0.3 s: ``scripts/bench_default_load.py``).

:class:`LoadFailure` reads what failed back from the sentence a run keeps (which optimiser: the one
onnxruntime's message names, or the one whose disabling loads the model), and :func:`pin_candidates`
turns it into the few sets of nodes that, kept FP32, may avoid it
(:func:`onnx_precision.convert.written_check.load_remedies` tries them).

A load that needs more memory than the run has is not a failure of the model, and no workaround is its
remedy: the child stops itself once its anonymous memory passes a budget (by default what the machine
and this process's cgroups have available when it starts), and a child the kernel killed for memory (its
OOM killer, at a cgroup's limit or the machine's memory: :class:`..memory.OomWatch`) is told from one that
crashed. Either way the run says the load was not checked, with the figures (:class:`MemoryShort`).
At its default options onnxruntime's CPU provider copies the weights out of their file: it computes an
FP16 MatMul in FP32 and folds the Cast it puts before the weight, an FP32 copy, twice the weight's bytes
in the file (the FP16 model of the 1.2B Llama decoder of scripts/llama_models.py, 2.38 GB on disk, holds
4.80 GB once loaded, 5.06 GB at the peak, 22 s; at ORT_DISABLE_ALL 0.04 GB, its weights mapped from the
file; scripts/bench_memory_budget.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Union

import onnx

from .. import memory
from ..context import ModelContext
from ..storage import is_external, model_tensors
from . import forkserver
from .sessions import ort_text

TIMEOUT_S = 600  # a large model may take minutes to optimise; a hang must not stop the run forever


@dataclass(frozen=True)
class Attempt:
    """One way to load the model: ``label`` is what a user passes to get it."""

    label: str
    disabled_optimizers: tuple[str, ...] = ()
    level: str | None = None  # an ort.GraphOptimizationLevel name; None: onnxruntime's default


DEFAULT = Attempt("default session options")
WORKAROUNDS = (
    Attempt("InferenceSession(..., disabled_optimizers=['NchwcTransformer'])", ("NchwcTransformer",)),
    Attempt("SessionOptions.graph_optimization_level = ORT_ENABLE_BASIC", level="ORT_ENABLE_BASIC"),
    Attempt("SessionOptions.graph_optimization_level = ORT_DISABLE_ALL", level="ORT_DISABLE_ALL"),
)

OVER_BUDGET = 4  # the child's exit status when its memory passed the budget
BUDGET_POLL_S = 0.02
# Run as ``python -c`` first: a thread that ends the child once its parent is gone. Nothing is ever
# written to the lifeline (the last argument); its read returns when its one writer, the parent, closes
# it, by dying or when done with the child. A second thread ends it (exit OVER_BUDGET, its anonymous
# memory on stdout) when that passes the budget (the argument before, bytes; 0: none): file pages, the
# weights it maps, are not counted, the kernel reclaims them.
# onnxruntime releases the GIL while it builds a session, so the threads run during the load.
_LIFELINE = f"""
import os, sys, threading, time
def _orphaned(fd=int(sys.argv[-1])):
    os.read(fd, 1)
    os._exit(1)
threading.Thread(target=_orphaned, daemon=True).start()
def _anonymous():
    with open("/proc/self/status") as f:
        return next((int(l.split()[1]) * 1024 for l in f if l.startswith("RssAnon:")), 0)
def _budget(limit=int(sys.argv[-2])):
    while True:
        held = _anonymous()
        if held > limit:
            print(f"memory {{held}}", flush=True)
            os._exit({OVER_BUDGET})
        time.sleep({BUDGET_POLL_S})
if int(sys.argv[-2]) and os.path.exists("/proc/self/status"):
    threading.Thread(target=_budget, daemon=True).start()
"""
# Then: exit 0 when the session is built, 3 with onnxruntime's message on stdout.
# The model is a path, or "-": its bytes on stdin, read first (the parent waits on the pipe).
_LOAD = """
import json, sys
path, config = sys.argv[1], json.loads(sys.argv[2])
model = sys.stdin.buffer.read() if path == "-" else path
import onnxruntime as ort
options = ort.SessionOptions()
for library in config["libraries"]:
    options.register_custom_ops_library(library)
if config["level"]:
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, config["level"])
kwargs = {"disabled_optimizers": config["disabled"]} if config["disabled"] else {}
try:
    ort.InferenceSession(model, options, providers=["CPUExecutionProvider"], **kwargs)
except Exception as e:
    print(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    sys.exit(3)
"""


Model = Union[str, bytes]  # a model file, or a serialized model holding its weights


def _child_command(path: str, attempt: Attempt, libraries: Sequence[str]) -> list[str]:
    config = {"libraries": list(libraries), "level": attempt.level,
              "disabled": list(attempt.disabled_optimizers)}
    return [sys.executable, "-c", _LIFELINE + _LOAD, path, json.dumps(config)]


class _Child:
    """A child loading ``model`` with ``attempt`` within ``budget`` bytes of anonymous memory (0: no
    budget), forked by this process's :mod:`.forkserver`, the budget and its lifeline's read end its
    last arguments; a model in memory is written to its stdin, which it reads first. This process holds
    the write end of the lifeline until it is done with the child; :attr:`watch` counts the OOM kills
    that concern it."""

    def __init__(self, model: Model, attempt: Attempt, libraries: Sequence[str], budget: int) -> None:
        path = model if isinstance(model, str) else "-"
        self.model_bytes = _model_bytes(model)
        self.budget = budget
        lifeline, self._lifeline = os.pipe()
        stdin, feed = os.pipe() if isinstance(model, bytes) else (os.open(os.devnull, os.O_RDONLY), -1)
        try:
            command = [*_child_command(path, attempt, libraries), str(budget)]
            self.process = forkserver.start(command, stdin, lifeline)
            self.watch = memory.OomWatch(self.process.pid)
        except BaseException:
            self.release()
            if feed >= 0:
                os.close(feed)
            raise
        finally:
            os.close(lifeline)
            os.close(stdin)
        if isinstance(model, bytes):
            with contextlib.suppress(BrokenPipeError), open(feed, "wb") as pipe:  # a child that
                pipe.write(model)  # died says how in _outcome

    def kill(self) -> None:
        self.process.kill()
        self.release()  # ends it too where its server can no longer kill it
        self.process.communicate()

    def release(self) -> None:
        """Close the lifeline's write end: the child, if still running, ends."""
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1


def _outcome(child: _Child) -> str:
    """"" when the child loaded the model, else what happened. A wait cut short (a timeout, an
    interrupt, a signal) kills the child."""
    try:
        stdout, stderr = child.process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        return f"onnxruntime did not load it within {TIMEOUT_S} s"
    except BaseException:
        child.kill()
        raise
    child.release()
    code = child.process.returncode
    assert code is not None  # communicate() waited for it
    memory.note_child(child.process.peak_rss)
    if code == 0:
        return ""
    if code == OVER_BUDGET and stdout.startswith("memory "):
        return MemoryShort(child.model_bytes, int(stdout.split()[1]), budget=child.budget).sentence
    killed = child.watch.killed(child.process.peak_rss) if code == -signal.SIGKILL else None
    if killed is not None:
        return MemoryShort(child.model_bytes, killed.peak, killed=killed).sentence
    if code < 0:
        return f"onnxruntime crashes ({_signal_name(-code)}) loading it"
    said = stdout.strip() or stderr.strip() or f"exit status {code}"
    return f"onnxruntime cannot load it: {ort_text(said.splitlines()[-1])}"


def _try(model: Model, attempt: Attempt, libraries: Sequence[str], budget: int | None = None) -> str:
    """"" when ``attempt`` loads the model in a child process, else what happened. ``budget``: the
    child's memory (None: what is available now)."""
    return _outcome(_Child(model, attempt, libraries, memory.available_bytes() if budget is None else budget))


def child_budget(run_budget: int | None) -> int:
    """What a default-load child may take: the run's budget less what this process holds now (the run's
    budget covers its children), never more than is available (None: what is available)."""
    available = memory.available_bytes()
    if run_budget is None:
        return available
    return max(1, min(available, run_budget - memory.anonymous_bytes()))


def _model_bytes(model: Model) -> int:
    """The model's bytes: in memory, or on disk with the data file a written model has beside it."""
    if isinstance(model, bytes):
        return len(model)
    return sum(os.path.getsize(f) for f in (model, model + ".data") if os.path.isfile(f))


@dataclass(frozen=True)
class MemoryShort:
    """A default load that needed more memory than the run had: stopped at ``budget`` (its anonymous
    memory then ``reached``), or ``killed`` by the kernel for memory (``reached``: the child's peak,
    0 unknown). Not the model's failure: the load was not checked (:attr:`sentence`)."""

    model_bytes: int
    reached: int
    budget: int = 0
    killed: memory.OomKill | None = None

    @property
    def sentence(self) -> str:
        size = memory.gigabytes(self.model_bytes)
        if self.killed is not None:
            reached = f", after it had reached {memory.gigabytes(self.reached)}" if self.reached else ""
            why = f"the kernel killed it for memory at {self.killed.where}{reached}"
        else:
            why = (f"it had taken {memory.gigabytes(self.reached)}, past the {memory.gigabytes(self.budget)} "
                   f"of memory the run could give it, and was stopped")
        return (f"{NOT_CHECKED}{why}; the model is {size}, and at its default options onnxruntime's CPU "
                f"provider holds an FP32 copy of each FP16 MatMul weight; load it where more memory is free "
                f"to check it")


NOT_CHECKED = "the load at onnxruntime's default session options was not checked: "


def loadable_in_memory(model: onnx.ModelProto) -> bool:
    """Whether a model converted in memory can be handed to a child as bytes: not when weights are
    in files (some converted only as they are saved), which onnxruntime would read as they are."""
    return not any(is_external(t) for t in model_tensors(model))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class DefaultLoad:
    """The model at ``path`` (or written in memory, as a context) being loaded with default session
    options in a child, started now, within the run's ``budget`` (:func:`child_budget`); :meth:`problem`
    waits for it, :meth:`cancel` stops it (nothing is asked of it any more). A model in memory that is
    not :func:`loadable_in_memory` is not loaded: its problem is "" and the caller says it was not
    checked."""

    def __init__(self, path: str | ModelContext, libraries: Sequence[str] = (), budget: int | None = None,
                 ) -> None:
        self.model: Model | None = path if isinstance(path, str) else (
            path.model.SerializeToString() if loadable_in_memory(path.model) else None)
        self.libraries = tuple(libraries)
        self._child: _Child | None = None
        if self.model is not None:
            self._child = _Child(self.model, DEFAULT, libraries, child_budget(budget))

    def problem(self) -> str:
        """As :func:`default_load_problem`."""
        if self.model is None:
            return ""
        if self._child is None:
            raise ValueError("the default load was cancelled")
        child, self._child = self._child, None
        return _with_workarounds(self.model, _outcome(child), self.libraries)

    def cancel(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child = None


def default_load_problem(path: str, libraries: Sequence[str] = ()) -> str:
    """"" when the model at ``path`` loads with onnxruntime's default session options; otherwise
    one sentence: what happened there, and the first workaround that loads it (or that none did)."""
    return _with_workarounds(path, _try(path, DEFAULT, libraries), libraries)


def _with_workarounds(model: Model, problem: str, libraries: Sequence[str]) -> str:
    if not problem or problem.startswith(NOT_CHECKED):  # a workaround is no remedy for memory
        return problem
    loads_with = next((a for a in WORKAROUNDS if not _try(model, a, libraries)), None)
    return LoadFailure(problem, loads_with).sentence


@dataclass(frozen=True)
class LoadFailure:
    """Why onnxruntime at its default options cannot load a model: what happened there
    (``onnxruntime crashes (SIGSEGV) loading it``), and the first workaround that loads it (None:
    none does). :attr:`sentence` is how a run states it; :meth:`of` reads it back."""

    outcome: str
    loads_with: Attempt | None = None

    @property
    def for_memory(self) -> bool:
        """Whether the load was not checked for want of memory (:class:`MemoryShort`): not a failure."""
        return self.outcome.startswith(NOT_CHECKED)

    @property
    def sentence(self) -> str:
        if self.for_memory:
            return self.outcome
        if self.loads_with is not None:
            return f"with default session options {self.outcome}; it loads with {self.loads_with.label}"
        return f"with default session options {self.outcome}, and with every workaround tried " \
               f"({'; '.join(a.label for a in WORKAROUNDS)})"

    @staticmethod
    def of(sentence: str) -> LoadFailure:
        """The failure a :attr:`sentence` states (a run keeps only the sentence)."""
        if sentence.startswith(NOT_CHECKED):
            return LoadFailure(sentence)
        outcome = sentence.removeprefix("with default session options ")
        for attempt in WORKAROUNDS:
            loads = f"; it loads with {attempt.label}"
            if outcome.endswith(loads):
                return LoadFailure(outcome.removesuffix(loads), attempt)
        return LoadFailure(outcome.partition(", and with every workaround tried (")[0])

    @property
    def named_nodes(self) -> tuple[str, ...]:
        """The nodes onnxruntime's message names, as its optimisers name what they make of one
        (``node (b0_scale/LayerNormFusion/)``)."""
        return tuple(dict.fromkeys(m.group(1) for m in _OPTIMISED_NODE.finditer(self.outcome)))

    @property
    def optimizer(self) -> str:
        """The optimiser that fails: the one onnxruntime's message names, else the one whose
        disabling loads the model; "" when neither tells."""
        named = [m.group(2) for m in _OPTIMISED_NODE.finditer(self.outcome)]
        if named:
            return named[0]
        disabled = self.loads_with.disabled_optimizers if self.loads_with is not None else ()
        return disabled[0] if len(disabled) == 1 else ""

    @property
    def cpu_only(self) -> str:
        """That the failing optimiser rewrites only what onnxruntime runs on its CPU provider, said
        ("" when it does not, or is not known)."""
        pattern = PATTERNS.get(self.optimizer)
        if pattern is None or not pattern.cpu_only:
            return ""
        return f"{self.optimizer} rewrites only what onnxruntime runs on its CPU provider"


# onnxruntime names a node an optimiser made after the node it replaced: "<node>/<Optimizer>/"
_OPTIMISED_NODE = re.compile(r"\(([^()/]+)/([A-Za-z]+)/\)")


@dataclass(frozen=True)
class Pattern:
    """What an optimiser rewrites: nodes of the ``anchors`` op types, then, following their outputs,
    the nodes of the ``through`` op types that read what it rewrote."""

    anchors: frozenset[str]
    through: frozenset[str]
    cpu_only: bool


# onnxruntime/core/optimizer/nchwc_transformer.cc (NchwcTransformerImpl::Transform): it runs only on
# nodes assigned to the CPU provider, and an FP16 Conv is one there (computed in FP32 between Casts)
PATTERNS = {
    "NchwcTransformer": Pattern(
        frozenset({"Conv", "MaxPool", "AveragePool"}),
        frozenset({"Add", "Sum", "Mul", "Concat", "Relu", "Sigmoid", "Tanh", "BatchNormalization",
                   "Transpose", "Upsample", "Resize", "GlobalMaxPool", "GlobalAveragePool"}),
        cpu_only=True),
}
MAX_PIN_SETS = 4  # child loads a remedy may cost (each as long as the default load)


def pin_candidates(ctx: ModelContext, low_nodes: Collection[str], failure: LoadFailure,
                   ) -> tuple[tuple[str, ...], ...]:
    """Sets of the 16-bit nodes ``low_nodes`` that, kept FP32, may avoid ``failure``: the smallest
    first, :data:`MAX_PIN_SETS` at most. The nodes onnxruntime's message names, if it names some;
    else the nodes the failing optimiser rewrites (:data:`PATTERNS`): those of each op type it
    extends the pattern through, one op type at a time, then all of them, then its anchors too."""
    named = [n for n in failure.named_nodes if n in low_nodes]
    pattern = PATTERNS.get(failure.optimizer)
    if named or pattern is None:
        return (tuple(named),) if named else ()
    rewritten = [n for n in _rewritten(ctx, pattern) if n in low_nodes]
    by_op: dict[str, list[str]] = {}
    for name in rewritten:
        by_op.setdefault(ctx.node_ops[name], []).append(name)
    through = sorted((nodes for op, nodes in by_op.items() if op not in pattern.anchors),
                     key=lambda nodes: (len(nodes), ctx.node_ops[nodes[0]]))
    union = [n for n in rewritten if ctx.node_ops[n] not in pattern.anchors]
    sets = [tuple(nodes) for nodes in through[:MAX_PIN_SETS - 2]] + [tuple(union), tuple(rewritten)]
    return tuple(s for s in dict.fromkeys(sets) if s)[:MAX_PIN_SETS]


def _rewritten(ctx: ModelContext, pattern: Pattern) -> list[str]:
    """The nodes ``pattern`` may rewrite, in the model's order: its anchors, and every node of its
    ``through`` types that reads (through such nodes) what an anchor computed."""
    reached = {ref.name for ref in ctx.nodes if ref.node.op_type in pattern.anchors}
    frontier = list(reached)
    by_name = {ref.name: ref for ref in ctx.nodes}
    while frontier:
        ref = by_name[frontier.pop()]
        for value in ref.node.output:
            for reader in ctx.index.consumers.get(value, ()):
                if reader.name not in reached and reader.node.op_type in pattern.through | pattern.anchors:
                    reached.add(reader.name)
                    frontier.append(reader.name)
    return [ref.name for ref in ctx.nodes if ref.name in reached]


def default_load_outcome(model: onnx.ModelProto, libraries: Sequence[str] = ()) -> str:
    """"" when ``model`` (held in memory: :func:`loadable_in_memory`) loads with onnxruntime's
    default session options in a child process, else what happened (no workaround is tried)."""
    return _try(model.SerializeToString(), DEFAULT, libraries)
