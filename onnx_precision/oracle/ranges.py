"""FP32 ranges: per tensor, the worst case over samples of max |x|, the smallest nonzero |x|, the share
of nonzero values the 16-bit type flushes to zero and the NaN/Inf counts (:class:`TensorStats`), and the
FP32 model's own non-finite values (:func:`first_nonfinite`: that is the model's fault, never FP16's).
:mod:`.inspection` measures them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ..float_types import FP16, LowPrecision
from ..format import json_float


@dataclass(frozen=True)
class TensorStats:
    """FP32 value range of one tensor (worst case over samples)."""

    max_abs: float          # over non-NaN values; inf if any Inf
    min_nonzero_abs: float  # inf when every value is zero
    flush_fraction: float   # nonzero values that FP16 flushes to zero, as a fraction of nonzero values
    nan_count: int
    inf_count: int
    size: int

    @property
    def finite(self) -> bool:
        return self.nan_count == 0 and self.inf_count == 0

    @property
    def overflows_fp16(self) -> bool:
        return self.overflows(FP16)

    @property
    def peak(self) -> float:
        """max |x|, NaN where a value is NaN."""
        return float("nan") if self.nan_count else self.max_abs

    def overflows(self, low: LowPrecision) -> bool:
        return bool(np.isfinite(self.max_abs) and self.max_abs > low.max)

    def worst(self, other: TensorStats) -> TensorStats:
        return TensorStats(max(self.max_abs, other.max_abs), min(self.min_nonzero_abs, other.min_nonzero_abs),
                           max(self.flush_fraction, other.flush_fraction),
                           max(self.nan_count, other.nan_count), max(self.inf_count, other.inf_count),
                           max(self.size, other.size))

    def to_json(self) -> dict:
        return {"max_abs": json_float(self.max_abs), "min_nonzero_abs": json_float(self.min_nonzero_abs),
                "flush_fraction": self.flush_fraction, "nan_count": self.nan_count,
                "inf_count": self.inf_count, "size": self.size}


def tensor_stats(values: np.ndarray, flush: float = FP16.flush) -> TensorStats:
    """The range of ``values``; ``flush``: |x| at or below it rounds to zero in the 16-bit type. A
    float64 tensor is judged in float64: its values past float32's range are finite, not Inf."""
    values = np.asarray(values)
    a = np.abs(values if values.dtype == np.float64 else values.astype(np.float32, copy=False)).ravel()
    size = int(a.size)
    if not size:
        return TensorStats(0.0, float("inf"), 0.0, 0, 0, 0)
    top = a.max()  # NaN if any NaN: the common all-finite case then needs no further counting
    nan_count = inf_count = 0
    if not np.isfinite(top):
        nan = np.isnan(a)
        nan_count = int(np.count_nonzero(nan))
        if nan_count:
            a = a[~nan]
        inf_count = int(np.count_nonzero(np.isinf(a)))
        if not a.size:
            return TensorStats(0.0, float("inf"), 0.0, nan_count, 0, size)
        top = a.max()
    positive = a > 0
    nonzero = int(np.count_nonzero(positive))
    min_nonzero = float(np.min(a, where=positive, initial=np.inf))
    tiny = int(np.count_nonzero(positive & (a <= flush))) if min_nonzero <= flush else 0
    flush = tiny / nonzero if nonzero else 0.0
    return TensorStats(float(top), min_nonzero, flush, nan_count, inf_count, size)


@dataclass(frozen=True)
class ReferenceResult:
    """The FP32 reference: ranges of every captured tensor and the FP32 model's own NaN/Inf."""

    stats: Mapping[str, TensorStats]        # graph inputs and main-graph float node outputs
    producers: Mapping[str, str]            # tensor -> producing node
    first_nonfinite: str | None             # first node (topological) non-finite from finite inputs
    outputs: tuple[dict[str, np.ndarray], ...]  # the FP32 graph outputs, per sample
    oracle: str = "emulate"
    # per sample, each tensor's max |x| on it alone: a generation's steps, each a sample, show a trend
    peaks: tuple[Mapping[str, float], ...] = ()

    def node_stats(self, node: onnx.NodeProto) -> list[TensorStats]:
        return [self.stats[o] for o in node.output if o in self.stats]


def _float_inputs(node: onnx.NodeProto, known: Iterable[str]) -> list[str]:
    known = set(known)
    return [i for i in node.input if i in known]


def first_nonfinite(nodes: Sequence[onnx.NodeProto], finite: Mapping[str, bool]) -> str | None:
    """The first of ``nodes`` whose output is non-finite where its float inputs are finite (``finite``: per
    tensor of one FP32 run, whether it is), or None."""
    for node in nodes:
        outs = [o for o in node.output if o in finite]
        if outs and not all(finite[o] for o in outs) and all(finite[i] for i in _float_inputs(node, finite)):
            return node.name
    return None


def is_float(value: np.ndarray) -> bool:
    return np.issubdtype(np.asarray(value).dtype, np.floating)


def merge_stats(acc: dict[str, TensorStats], values: Mapping[str, np.ndarray], flush: float,
                peaks: dict[str, float] | None = None) -> None:
    """``acc`` with the worst case of each float tensor of ``values``; ``peaks`` (one sample's): each one's
    :attr:`TensorStats.peak`."""
    for name, value in values.items():
        if not is_float(value):
            continue
        stats = tensor_stats(value, flush)
        merge_worst(acc, name, stats)
        if peaks is not None:
            peaks[name] = stats.peak


def merge_worst(acc: dict[str, TensorStats], name: str, stats: TensorStats) -> None:
    acc[name] = acc[name].worst(stats) if name in acc else stats


def first_nonfinite_output(outputs: Sequence[Mapping[str, np.ndarray]]) -> tuple[int, str] | None:
    """(sample, output name) of the first float output holding NaN/Inf, or None."""
    for i, out in enumerate(outputs):
        for name, value in out.items():
            if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
                return i, name
    return None
