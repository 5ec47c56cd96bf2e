"""One job of a target: what the user is told of it, as command lines: the options that select it in a
suggested command, and what to run next on a model written for it.

A target's facts (:mod:`.base`) hold what the runtime computes; its :class:`Commands` only spell
commands, each runnable when pasted (:func:`onnx_precision.suggested.quoted`). TensorRT's flags file is
TensorRT's, whatever the target (:func:`onnx_precision.trt.trt_flags_text`), and is not a target's job.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from ..float_types import FP16, LowPrecision
from ..suggested import RunArgs, quoted


@dataclass(frozen=True)
class Commands:
    """A target's commands (see the module docstring); this one's, a runtime whose kernels onnxruntime's
    CUDA provider has (the generic target): the check on the GPU."""

    low: LowPrecision = FP16

    def cli_args(self) -> list[str]:
        """The options that select the target in a suggested command (``--target``, ``--low-precision``;
        at their defaults left out)."""
        return ["--low-precision", self.low.precision] if self.low is not FP16 else []

    def next_step(self, model: onnx.ModelProto, run: RunArgs) -> str:
        """What to do with the written ``model`` on the target, as one command line that runs when pasted,
        its shell comment saying what it does: here the check on the GPU, judged as the run judged (which
        runtimes the plan holds on is the run's to say, having judged it on each:
        :mod:`onnx_precision.runtimes`)."""
        oracle = run.native_oracle
        return (f"{quoted(run.check_args(self.cli_args(), oracle.name))}  # checks it on the GPU "
                f"(onnxruntime-gpu's {oracle.title} provider) as this run judged it")


@dataclass(frozen=True)
class NamedCommands(Commands):
    """The commands of a target selected by ``--target NAME``, its name (not the default's)."""

    name: str = "generic"

    def cli_args(self) -> list[str]:
        return ["--target", self.name, *super().cli_args()]
