"""Targets by the names the command line gives them (``--target``, ``--trt-version``)."""

from __future__ import annotations

from ..trt.versions import NEWEST, TrtVersion
from .base import Target
from .generic import GENERIC
from .tensorrt import TensorRTTarget

KINDS = ("generic", "tensorrt")


def target_named(kind: str, trt_version: TrtVersion = NEWEST) -> Target:
    """The target ``kind`` (one of :data:`KINDS`); ``trt_version`` is TensorRT's release."""
    if kind == "tensorrt":
        return TensorRTTarget(trt_version)
    if kind == "generic":
        return GENERIC
    raise ValueError(f"unknown target {kind!r}; expected one of {', '.join(KINDS)}")
