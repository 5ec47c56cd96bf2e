"""Does the written model load in onnxruntime as the user will load it, with default options?

The oracle's sessions disable graph optimisations (see :mod:`.session`), so a model can pass
every check and still crash onnxruntime at its default level: an optimiser (NchwcTransformer on
some TorchScript transformers) segfaults on it. :func:`default_load_problem` loads the written
file in a child process, where a crash cannot take the run with it, with default session options
(the user's custom-op libraries registered); when that fails it tries the usual workarounds, each
in its own child, and names the first that loads. :class:`DefaultLoad` starts the first child at
once, so the load runs while the caller verifies the model (on the 26 401-node LayerNorm stack the
child takes 5 s, as long as half the verification). A model converted in memory is handed to the
child serialized, on its standard input, as ``InferenceSession(bytes)`` loads it.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union, cast

import onnx

from ..context import ModelContext
from ..storage import is_external, model_tensors
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

# Run as ``python -c``: exit 0 when the session is built, 3 with onnxruntime's message on stdout.
# The model is a path, or "-": its bytes on stdin, read first (the parent waits on the pipe).
_CHILD = """
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
    return [sys.executable, "-c", _CHILD, path, json.dumps(config)]


def _start(model: Model, attempt: Attempt, libraries: Sequence[str]) -> subprocess.Popen:
    """The child, started; a model in memory is written to its stdin, which it reads first."""
    path = model if isinstance(model, str) else "-"
    child = subprocess.Popen(_child_command(path, attempt, libraries), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL if isinstance(model, str) else subprocess.PIPE)
    if isinstance(model, bytes) and child.stdin is not None:
        with contextlib.suppress(BrokenPipeError):  # a child that died says how in _outcome
            cast(io.TextIOWrapper, child.stdin).buffer.write(model)  # text=True is for its output
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()
        child.stdin = None  # written: communicate() has nothing more to send
    return child


def _outcome(child: subprocess.Popen) -> str:
    """"" when the child loaded the model, else what happened."""
    try:
        stdout, stderr = child.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return f"onnxruntime did not load it within {TIMEOUT_S} s"
    if child.returncode == 0:
        return ""
    if child.returncode < 0:
        return f"onnxruntime crashes ({_signal_name(-child.returncode)}) loading it"
    said = stdout.strip() or stderr.strip() or f"exit status {child.returncode}"
    return f"onnxruntime cannot load it: {ort_text(said.splitlines()[-1])}"


def _try(model: Model, attempt: Attempt, libraries: Sequence[str]) -> str:
    """"" when ``attempt`` loads the model in a child process, else what happened."""
    return _outcome(_start(model, attempt, libraries))


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
    options in a child, started now; :meth:`problem` waits for it, :meth:`cancel` stops it (nothing
    is asked of it any more). A model in memory that is not :func:`loadable_in_memory` is not
    loaded: its problem is "" and the caller says it was not checked."""

    def __init__(self, path: str | ModelContext, libraries: Sequence[str] = ()) -> None:
        self.model: Model | None = path if isinstance(path, str) else (
            path.model.SerializeToString() if loadable_in_memory(path.model) else None)
        self.libraries = tuple(libraries)
        self._child: subprocess.Popen | None = None
        if self.model is not None:
            self._child = _start(self.model, DEFAULT, libraries)

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
            self._child.communicate()
            self._child = None


def default_load_problem(path: str, libraries: Sequence[str] = ()) -> str:
    """"" when the model at ``path`` loads with onnxruntime's default session options; otherwise
    one sentence: what happened there, and the first workaround that loads it (or that none did)."""
    return _with_workarounds(path, _try(path, DEFAULT, libraries), libraries)


def _with_workarounds(model: Model, problem: str, libraries: Sequence[str]) -> str:
    if not problem:
        return ""
    for attempt in WORKAROUNDS:
        if not _try(model, attempt, libraries):
            return f"with default session options {problem}; it loads with {attempt.label}"
    return f"with default session options {problem}, and with every workaround tried " \
           f"({'; '.join(a.label for a in WORKAROUNDS)})"
