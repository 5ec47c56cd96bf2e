"""The target option group (:mod:`onnx_precision.options`): where the written model runs, and the custom-op
kernels every onnxruntime session of the run registers. The CLI reads the target from ``--target``,
``--trt-version``, ``--low-precision`` and ``--fallback`` (:func:`onnx_precision.cli.common.target`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import UsageError
from ..options import Group
from .base import Target
from .generic import GENERIC
from .named import KINDS


@dataclass(frozen=True)
class Targeting(Group):
    """Where the written model runs (:class:`~.base.Target`), and the shared libraries of custom-op kernels
    registered on every onnxruntime session of the model (``--ort-custom-op-library``)."""

    title: ClassVar[str] = "target"

    target: Target = GENERIC
    custom_op_libraries: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.target, Target):
            named = (f" (onnx_precision.target.target_named({self.target!r}))"
                     if isinstance(self.target, str) and self.target in KINDS else "")
            raise UsageError(f"target {self.target!r}: expected an onnx_precision.target.Target{named}")
        libraries = self.custom_op_libraries
        if not isinstance(libraries, (tuple, list)) or not all(isinstance(v, str) for v in libraries):
            hint = f" (one is written ({libraries!r},))" if isinstance(libraries, str) else ""
            raise UsageError(f"custom_op_libraries {libraries!r}: expected a tuple of strings{hint}")

    def cli_args(self) -> list[str]:
        """The options that select the target and register the libraries, in a suggested command."""
        return [*self.target.commands.cli_args(),
                *(arg for path in self.custom_op_libraries for arg in ("--ort-custom-op-library", path))]
