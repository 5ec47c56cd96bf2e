"""The project's small vocabularies, typed: modes, statuses, reason sources (and the oracle's name).

Each is a ``Literal`` so mypy checks every spelling, with the tuple of its values beside it for
argument parsers and validation (one definition each).
"""

from __future__ import annotations

from typing import Literal, get_args

Mode = Literal["all-fp16", "static", "auto"]
MODES: tuple[Mode, ...] = get_args(Mode)
MeasuringMode = Literal["static", "auto"]  # the modes that run the oracle

# How a run ended: passed/failed (the plan, or the written model), fp32-nonfinite (the FP32 model
# itself is at fault), not-checked (all-fp16 writes without measuring), ort-load-failed (the written
# model passes, but onnxruntime with its default session options crashes or fails loading it).
Status = Literal["passed", "failed", "fp32-nonfinite", "not-checked", "ort-load-failed"]

# An oracle a user can ask for by name: "emulate", "reference", or a runtime's native provider (the
# names come from the registry of runtimes, onnx_precision.target.ORACLE_NAMES); results also carry
# "native:<provider>" labels.
OracleName = str

# Why a node has its precision (see plan.Reason); "load": kept FP32 so that onnxruntime loads the
# written model at its default options (convert.written_check.load_remedies).
ReasonSource = Literal["default", "user", "type", "initializer", "rule", "range", "search", "headroom",
                       "target", "load"]
REASON_SOURCES: tuple[ReasonSource, ...] = get_args(ReasonSource)
