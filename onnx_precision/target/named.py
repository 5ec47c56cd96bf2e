"""Targets by the names the command line gives them (``--target``, ``--trt-version``)."""

from __future__ import annotations

from ..float_types import FP16, LowPrecision
from ..trt.versions import NEWEST, TrtVersion
from .base import Target
from .generic import GenericTarget
from .tensorrt import TensorRTTarget

KINDS = ("generic", "tensorrt")


def target_named(kind: str, trt_version: TrtVersion = NEWEST, low: LowPrecision = FP16,
                 fallback: LowPrecision | None = None) -> Target:
    """The target ``kind`` (one of :data:`KINDS`); ``trt_version`` is TensorRT's release, ``low`` the
    16-bit type, ``fallback`` the type tried before FP32 where ``low`` fails."""
    if kind == "tensorrt":
        return TensorRTTarget(trt_version, low, fallback)
    if kind == "generic":
        return GenericTarget(low, fallback)
    raise ValueError(f"unknown target {kind!r}; expected one of {', '.join(KINDS)}")
