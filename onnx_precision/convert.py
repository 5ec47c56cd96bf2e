"""The library entry point of ``onnx-precision convert``."""

from __future__ import annotations

from dataclasses import dataclass, field

from .compare import Tolerance
from .data import SampleSpec


@dataclass(frozen=True)
class ConvertOptions:
    mode: str = "all-fp16"  # "all-fp16" | "static" | "auto"
    keep_fp32: tuple[str, ...] = ()  # regexes over node names
    keep_fp32_ops: tuple[str, ...] = ()
    plan_path: str | None = None  # a plan to start from (--plan)
    fp16_io: bool = False
    external_data: bool = False  # write weights to <output>.data (forced for models over 2 GB)
    trt_flags_path: str | None = None
    plan_out: str | None = None  # write the final plan as JSON
    samples: SampleSpec = field(default_factory=SampleSpec)
    tolerance: Tolerance = field(default_factory=Tolerance)
    headroom: float = 2.0
    report_json: str | None = None
    report_md: str | None = None
    oracle: str = "emulate"  # "emulate" | "cuda" | "tensorrt"
