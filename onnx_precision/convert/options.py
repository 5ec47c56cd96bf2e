"""``convert``'s options, as one value (:class:`ConvertOptions`): its own, and the groups it shares with
``check`` and ``analyze`` (:mod:`onnx_precision.options`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..data import SampleSpec, command_spec, shape_problem
from ..errors import UsageError
from ..options import Composed, GenerationOptions, Judging, Output
from ..target import Targeting
from ..trt.layer_precisions import LayerFlags
from ..vocab import Mode, OracleName


@dataclass(frozen=True, init=False)
class ConvertOptions(Composed):
    """``convert``'s options (the CLI's help says what each does): its own, and the groups it shares with
    ``check`` and ``analyze`` (:mod:`..options`): the samples, what the run judges by, where the written
    model runs, the files it writes, how a decoder or streaming model is run over many steps. A group's
    field may also be given by its own name, as before the groups: ``ConvertOptions(tolerance=...,
    target=...)``."""

    mode: Mode = "auto"
    keep_fp32: tuple[str, ...] = ()  # regexes over node names
    keep_fp32_ops: tuple[str, ...] = ()
    plan_path: str | None = None  # a plan to start from (--plan)
    # TensorRT 10's --layerPrecisions/--layerOutputTypes, Polygraphy's --layer-precisions: FP32 layers pinned
    layer_flags: LayerFlags = field(default_factory=LayerFlags)
    fp16_io: bool = False
    samples: SampleSpec = field(default_factory=SampleSpec)
    validation_inputs: str | None = None  # held-out samples: verified, never searched on
    judging: Judging = field(default_factory=Judging)
    targeting: Targeting = field(default_factory=Targeting)
    output: Output = field(default_factory=Output)
    generation: GenerationOptions = field(default_factory=GenerationOptions)
    headroom: float = 2.0  # auto.DEFAULT_HEADROOM: one binade of margin over the samples (0: off)
    oracle: OracleName = "emulate"
    # the TensorRT shape profile per input, {"min"|"opt"|"max": shape} (--trt-*-shapes); else the samples'
    trt_profile: Mapping[str, Mapping[str, tuple[int, ...]]] = field(default_factory=dict)
    max_probes: int | None = None  # search budgets (auto mode): on exhaustion the cheapest passing
    time_budget: float | None = None  # plan probed so far is kept, marked as such
    # shrink a large passing set to a 1-minimal one, not only as far as it can win (--exhaustive-minimise)
    exhaustive_minimise: bool = False
    # static/auto: a written plan whose 16-bit share of estimated FLOPs (percent, as the summary gives
    # it) is below this fails the run (--min-16bit-share)
    min_16bit_share: float | None = None

    def __post_init__(self) -> None:
        share = self.min_16bit_share
        if share is not None and not (isinstance(share, (int, float)) and 0 <= share <= 100):
            raise UsageError(f"--min-16bit-share {share}: expected a percentage between 0 and 100")
        for name in ("keep_fp32", "keep_fp32_ops"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
                hint = f" (one is written ({value!r},))" if isinstance(value, str) else ""
                raise UsageError(f"{name} {value!r}: expected a tuple of strings{hint}")
        object.__setattr__(self, "samples", command_spec(self.samples, self.judging.memory_budget))
        probes = self.max_probes
        if probes is not None and (isinstance(probes, bool) or not isinstance(probes, int) or probes < 1):
            raise UsageError(f"max_probes {probes!r}: expected an integer >= 1 (None: no limit)")
        budgets = (("time_budget", self.time_budget, True), ("headroom", self.headroom, False))
        for name, value, positive in budgets:
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if value is not None and not (number and (value > 0 if positive else value >= 0)):
                raise UsageError(f"{name} {value!r}: expected a finite number {'>' if positive else '>='} 0")
        for name, shapes in self.trt_profile.items():
            for which, shape in shapes.items():
                problem = shape_problem(shape)
                if problem:
                    raise UsageError(f"--trt-{which}-shapes {name}: {problem}")


def require_options(options: object) -> ConvertOptions:
    """``options``, once it is a ConvertOptions (else a one-line UsageError)."""
    if not isinstance(options, ConvertOptions):
        raise UsageError(f"options: expected onnx_precision.convert.ConvertOptions; got "
                         f"{type(options).__name__}")
    return options


DEFAULTS = ConvertOptions()  # every option at its default
