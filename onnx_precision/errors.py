"""The error family of onnx-precision.

Every mistake a user can make (a missing file, a plan naming an unknown node, sample data of the
wrong shape) raises a subclass of :class:`PrecisionError` whose message is one line naming the
file, node or tensor at fault. The CLI prints that line and exits non-zero (the machine failing to write
an output, a full disk, is one too: :class:`WriteError`, exit 1). A "cannot happen" raises
:class:`InternalError`, which is not in that family: it is a bug and keeps its traceback.
"""

from __future__ import annotations


class PrecisionError(Exception):
    """A problem with the user's input, reported as one line."""

    exit_code = 2


class ModelLoadError(PrecisionError):
    """The model file is missing, not ONNX, truncated, or its external data is missing."""


class CustomOpError(ModelLoadError):
    """onnxruntime cannot load the model: it has no kernel for a custom-domain op.

    ``node_text`` names the node and its op (``node 'p' (com.acme:Plugin)``), for callers that go on
    without onnxruntime (``--mode static``) and say so in their own words."""

    def __init__(self, message: str, node_text: str) -> None:
        super().__init__(message)
        self.node_text = node_text


class PlanError(PrecisionError):
    """A precision plan is malformed or names nodes the model does not have."""


class DataError(PrecisionError):
    """Sample data does not fit the model (names, dtypes, ranks) or cannot be read."""


class OutputError(PrecisionError):
    """An output path cannot be written (e.g. it is the input file)."""


class WriteError(OutputError):
    """An output cannot be written for the machine's reason, not the user's: a full disk or quota, an
    I/O error. One line naming the file, as the other output errors, but exit 1, as the CLI's other
    operating-system failures: the path was fine (its directory took the run's staging folder)."""

    exit_code = 1


class SearchError(PrecisionError):
    """The automatic search cannot produce a passing plan (e.g. the FP32 model is itself non-finite)."""

    exit_code = 1


class UsageError(PrecisionError):
    """An option does not fit the model (e.g. a per-output tolerance for an output it does not have)."""


class OracleUnavailable(PrecisionError):
    """The requested oracle cannot run here (e.g. its onnxruntime provider is not installed)."""


class ReferenceFailure(PrecisionError):
    """onnx.reference, the ``reference`` oracle, cannot run a model (an op it lacks, a failure of its own):
    that implementation is the failing party, named as such in one line. ``detail`` is its own error;
    ``whose`` says whose limit it is not (onnx-precision's, and the models' where it fails on both)."""

    def __init__(self, what: str, detail: str, whose: str = "of onnx-precision") -> None:
        super().__init__(f"onnx.reference (--oracle reference) cannot run {what}: {detail}; that is a limit "
                         f"of onnx.reference, not {whose}: judge with --oracle emulate")
        self.detail = detail


class InternalError(Exception):
    """Something that cannot happen did: a bug in onnx-precision, never the user's input.

    It is deliberately outside the :class:`PrecisionError` family, so the CLI reports it as a bug
    (a line asking for a report, the traceback with -v) instead of printing it as a user mistake.
    """
