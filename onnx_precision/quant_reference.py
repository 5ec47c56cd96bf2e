"""What a quantized model's 16-bit remainder is judged against: the quantization error, and a gate relative
to it.

Judged against the QDQ model run in FP32 (float fake-quantisation), the 16-bit remainder fails on noise
of the quantizer's own size: FP16 rounding before a ``QuantizeLinear`` moves its input across a rounding
boundary here and there, and that element then differs by one quantum (a *flip*). A flip does not make
the model worse than its quantization already made it; it draws the quantization noise again. So the
16-bit remainder is judged against an unquantized reference, relative to the quantization error:

* with ``--reference-model ORIGINAL.onnx`` (the FP32 model before quantization, with the same inputs
  and outputs), against its outputs;
* without one, against the model with its activation quantizers bypassed (each per-tensor
  ``QuantizeLinear -> DequantizeLinear`` pair whose Q reads an activation made a clamp to the
  quantizer's range, which quantize_static relies on in place of a Relu; weight DQs stay): its
  activations unquantized, the flips' noise measured as part of the quantization error.

Per output and per sample, the *quantization error* is the rel RMS err of the QDQ model in FP32 against
that reference; each sample's own bound is ``(1 + margin)`` times it (a sample the quantizers hit harder
has a looser bound), ``margin`` (``--quant-margin``) 0.3 by default: the remainder may add 30% to the
quantization error (measured: an all-FP16 remainder adds 0.3% on a QDQ MLP, 18% against the original and
27% against the bypassed model on a 4-layer ViT-like block quantized by quantize_static). Slices are
judged against the larger of the tolerance's slice bound and ``(1 + margin)`` times the sample's
quantization error's worst slice. An output the quantizers do not reach (a quantization error of 0)
keeps the tolerance as given.

How the samples are judged: one sample, against its own bounds. Two or more, over the samples together
(``Tolerance.sample_ceiling``, :func:`onnx_precision.judge.acceptance.pooled`): the root mean square
over them of the remainder's rel RMS err (and of its worst slice's) against that of their own bounds, and
each sample alone within :data:`CEILING` times its own bounds. One sample's ratio of the remainder's error
to its quantization error is not what the remainder costs: rounding a quantizer's input to 16 bits moves
some values across its rounding boundaries, and the remainder computes another draw of the quantization
noise, larger on one sample, smaller on the next (:class:`Pooled`). Judged sample by sample, that redraw
failed the all-16-bit remainder of an FP8 ViT block on 64 samples (ratios 0.76 to 1.59 over 1.3), and the
search made 99 FP32 pins for a pooled error no better; over the samples together it costs -2.5%.

A model without Q/DQ pairs and without a reference model has no gate: it is judged against itself as
before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import quantized
from .context import ModelContext, load_model
from .errors import UsageError
from .format import json_float, number
from .judge import Comparison, Tolerance, compare_outputs
from .judge.metrics import Pool
from .options import DEFAULT_MARGIN as DEFAULT_MARGIN  # --quant-margin's, defined with the option (Judging)
from .options import margin_problem

BYPASSED = "the model with its activation quantizers bypassed"
# How far one sample's remainder may pass its own bounds where the samples are judged together: 2 x (1 +
# margin), 2.6 x its quantization error at the default margin. The redraw alone passes a sample's own
# bound by up to a third: scripts/bench_fp8_remainder.py --samples 512 (tests/test_fp8_remainder.py's ViT
# block, FP8 and INT8, ten plans each: 10 240 sample-draws) found at most 1.32 x the bound on the whole
# output and 1.72 x on the worst slice (1.26 and 1.34 on 64 samples). 2 holds them all, and a sample whose
# remainder breaks fails alone whatever the others pool to: an overflow's NaN, a collapsed row (slice rel
# RMS err near 1, where these slices' bounds are 0.2-0.4), an output off by 0.3 to 1 (models/ breakages)
# where quantization costs 0.04-0.11.
CEILING = 2.0


@dataclass(frozen=True)
class QuantGate:
    """The reference a quantized model's remainder is judged against, and the tolerance of each sample
    that judges it (each sample's bound is relative to its own quantization error)."""

    source: str  # the reference model's path, or BYPASSED
    reference: ModelContext  # the model whose outputs are the reference
    given: Tolerance  # the tolerance as given, which outputs the quantizers do not reach keep
    margin: float
    outputs: tuple[dict[str, np.ndarray], ...]  # the reference's outputs per sample
    # per sample: output -> rel RMS err of the QDQ model in FP32 against the reference
    quantization: tuple[Mapping[str, float], ...]
    tolerances: tuple[Tolerance, ...]  # per sample: each reached output's bound (1 + margin) x its error

    @property
    def tolerance(self) -> Tolerance:
        """The one tolerance a report states: per reached output, over several samples the bounds they
        hold together (the root mean square of each sample's) with the ceiling of one; on one sample,
        its own bounds."""
        judged = self.given
        for name in self.given_outputs:
            bounds = [t.for_output(name) for t, q in zip(self.tolerances, self.quantization) if q[name] > 0]
            if bounds:
                def rms(values: list[float]) -> float:
                    return float(np.sqrt(np.mean(np.square(values))))

                judged = judged.with_output(name, error_stat="rms",
                                            max_rel_rms=rms([b.max_rel_rms for b in bounds]),
                                            max_slice_rel_rms=rms([b.max_slice_rel_rms for b in bounds]),
                                            sample_ceiling=bounds[0].sample_ceiling)
        return judged

    @property
    def pooled_samples(self) -> bool:
        """Whether the samples are judged together (two or more) or each against its own bounds."""
        return len(self.quantization) > 1

    @property
    def relative(self) -> dict[str, float]:
        """The outputs whose bound is relative to their quantization error, with the margin (for the
        thin-pass note: 'the bound (1 + 0.3) x the quantization error 0.0543 = 0.0706')."""
        return {name: self.margin for name in self.given_outputs
                if any(q[name] > 0 for q in self.quantization)}

    @property
    def given_outputs(self) -> tuple[str, ...]:
        return tuple(self.quantization[0]) if self.quantization else ()

    def on(self, ctx: ModelContext, feeds: Sequence[Mapping[str, np.ndarray]]) -> QuantGate:
        """This gate (its reference, tolerance and margin) on other samples of ``ctx``'s model (held-out
        samples: :meth:`onnx_precision.basis.Basis.held_out`)."""
        return measured(ctx, self, feeds)

    def _measured(self, judged: Comparison | None) -> dict[str, list[tuple[int, float, float]]]:
        """Per output the quantizers reach, (sample, its quantization error, the remainder's rel RMS err)
        for each sample of ``judged`` (a candidate against the reference, on this gate's samples) where the
        output was measured. {} without per-sample comparisons."""
        per_sample = () if judged is None else judged.per_sample or ((judged,) if judged.samples == 1 else ())
        if len(per_sample) != len(self.quantization):
            return {}
        found: dict[str, list[tuple[int, float, float]]] = {}
        for name in self.given_outputs:
            errors = [(i, q[name], next((m.rel_rms_err for m in c.outputs if m.name == name), None))
                      for i, (q, c) in enumerate(zip(self.quantization, per_sample)) if q[name] > 0]
            measured = [(i, q, r) for i, q, r in errors if r is not None]
            if measured:
                found[name] = measured
        return found

    def deciding(self, judged: Comparison | None) -> dict[str, Deciding]:
        """Per output the quantizers reach, the sample of ``judged`` whose remainder adds the most to its
        own quantization error, nearest the bound it is held to alone or furthest past it: on one sample,
        its verdict; over several, the sample nearest the ceiling (:data:`CEILING`)."""
        found: dict[str, Deciding] = {}
        ceiling = CEILING if self.pooled_samples else 1.0
        for name, measured in self._measured(judged).items():
            # NaN (a remainder that is not finite) sorts as the worst
            i, q, r = max(measured, key=lambda e: e[2] / e[1] if np.isfinite(e[2]) else np.inf)
            found[name] = Deciding(i, len(self.quantization), q, r, ceiling * (1 + self.margin) * q, ceiling)
        return found

    def pooled(self, judged: Comparison | None) -> dict[str, Pooled]:
        """Per output the quantizers reach, over two or more samples, what ``judged`` (merged over this
        gate's samples) measured of it over the samples together, which its verdict reads
        (:class:`Pooled`)."""
        if judged is None or not self.pooled_samples:
            return {}
        pools = {m.name: m.pool for m in judged.outputs if m.pool is not None}
        return {name: Pooled.of(measured, pools[name]) for name, measured in self._measured(judged).items()
                if name in pools}

    def to_json(self, judged: Comparison | None) -> dict[str, object]:
        """The gate as the JSON reports write it: the reference, the margin, how the samples were judged
        (``judged``: "together" or "each"; ``ceiling``: how far one sample may pass its own bounds), each
        output's quantization error per sample, the sample whose remainder adds the most on ``judged``
        (:meth:`deciding`) and the samples together (:meth:`pooled`)."""
        return {"reference": self.source, "margin": self.margin,
                "judged": "together" if self.pooled_samples else "each",
                "ceiling": CEILING if self.pooled_samples else 1.0,
                "quantization_error": {name: [json_float(q[name]) for q in self.quantization]
                                       for name in self.given_outputs},
                "outputs": {name: d.to_json() for name, d in self.deciding(judged).items()},
                "pooled": {name: p.to_json() for name, p in self.pooled(judged).items()}}

    def notes(self, verified: Comparison | None) -> tuple[str, ...]:
        """What the remainder was judged against and how, and per output the quantization error, the
        remainder's (``verified``: the written model against the reference) and the bound; with several
        samples, over them together (:meth:`pooled`) and the sample whose remainder adds the most
        (:meth:`deciding`)."""
        if self.given_outputs and not any(e for q in self.quantization for e in q.values()):
            # --reference-model naming the quantized model itself: there is no quantization error to
            # bound, and each output is judged by the tolerance as given (not 'not reached by the quantizers')
            return (f"quantized model: the 16-bit remainder is judged against {self.source}, which computes "
                    f"what the quantized model computes in FP32 (quantization error 0 on every output and "
                    f"sample: it is the quantized model itself), so by the tolerance as given, not by "
                    f"{1 + self.margin:g} x a quantization error",)
        lines = [self._rule()]
        deciding, pooled = self.deciding(verified), self.pooled(verified)
        for name in self.given_outputs:
            errors = [q[name] for q in self.quantization if q[name] > 0]
            if not errors:
                lines.append(f"{name}: not reached by the quantizers (quantization error 0): judged by the "
                             f"tolerance as given")
                continue
            worst = deciding.get(name)
            if worst is None:
                count = f" on {len(self.quantization)} samples" if self.pooled_samples else ""
                lines.append(f"{name}: quantization error {_span(errors)}{count}, bound "
                             f"{_span([(1 + self.margin) * e for e in errors])}")
            elif not self.pooled_samples:
                lines.append(f"{name}: quantization error {number(worst.quantization)}, 16-bit remainder "
                             f"{number(worst.remainder)} ({_added(worst.remainder, worst.quantization)}), "
                             f"bound {number(worst.bound)}")
            else:
                if name in pooled:
                    lines.append(f"{name}: {pooled[name].text(_span(errors))}")
                lines.append(f"{name}: {worst.text()}")
            if max(errors) > 1:
                lines.append(self._loose(name, max(errors)))
        return tuple(lines)

    def _rule(self) -> str:
        """The note that says how the remainder is judged."""
        head = f"quantized model: the 16-bit remainder is judged against {self.source}"
        gauge = f"(the QDQ model in FP32 against it; --quant-margin {self.margin:g})"
        if not self.pooled_samples:
            return (f"{head}: on each sample, each output's rel RMS err may be at most {1 + self.margin:g} x "
                    f"that sample's quantization error {gauge}")
        bound = 1 + self.margin
        return (f"{head} over the {len(self.quantization)} samples together: per output, the root mean "
                f"square over them of its rel RMS err (and of its worst slice's) may be at most {bound:g} x "
                f"that of the quantization error {gauge}, and each sample's at most {CEILING * bound:g} x "
                f"its own ({CEILING:g} x {bound:g}: a ceiling that fails one broken sample, above the redraw "
                f"of the quantization noise that rounding to 16 bits makes on each)")

    def _loose(self, name: str, error: float) -> str:
        """The note on an output whose quantization error passes the output itself."""
        return (f"{name}: its quantization error {number(error)} is larger than the output itself (rel RMS "
                f"err over 1: the QDQ model and {self.source} disagree on these samples), so a bound of "
                f"{1 + self.margin:g} x it says little of the 16-bit remainder: judge on inputs like the "
                f"quantizers' calibration data (--inputs), or check the quantization")


@dataclass(frozen=True)
class Deciding:
    """The sample whose remainder adds the most to its own quantization error, and its figures: on one
    sample the verdict's, over several the sample nearest the ceiling of one sample."""

    sample: int  # its index among the samples (0-based, as the run's failures name samples)
    samples: int
    quantization: float  # its quantization error
    remainder: float  # the 16-bit remainder's rel RMS err on it
    bound: float  # what it is held to alone: ceiling x (1 + margin) x quantization
    ceiling: float = 1.0  # 1: its own bound; CEILING, where the samples are judged together

    @property
    def ratio(self) -> float:
        return self.remainder / self.quantization

    @property
    def passed(self) -> bool:
        return bool(self.remainder <= self.bound)  # numpy floats give numpy bools, which JSON refuses

    def text(self) -> str:
        """'decided by sample 1, where the remainder adds the most: 16-bit remainder 0.07 against its
        quantization error 0.0543 (+28.9% over the quantization error, ratio 1.289), within its bound
        0.0706'; where the samples are judged together, '... within its ceiling 0.1412 (2 x its bound)'."""
        within = "within" if self.passed else "over"
        figures = (f"16-bit remainder {number(self.remainder)} against its quantization error "
                   f"{number(self.quantization)} ({_added(self.remainder, self.quantization)}, ratio "
                   f"{self.ratio:.4g})")
        if self.ceiling == 1:
            return (f"decided by sample {self.sample}, where the remainder adds the most: {figures}, "
                    f"{within} its bound {number(self.bound)}")
        return (f"sample {self.sample}, where the remainder adds the most: {figures}, {within} its ceiling "
                f"{number(self.bound)} ({self.ceiling:g} x its bound)")

    def to_json(self) -> dict[str, object]:
        return {"sample": self.sample, "samples": self.samples,
                "quantization_error": json_float(self.quantization),
                "remainder_rel_rms_err": json_float(self.remainder), "ratio": json_float(self.ratio),
                "bound": json_float(self.bound), "ceiling": self.ceiling, "passed": self.passed}


@dataclass(frozen=True)
class Pooled:
    """One output over several samples together: the root mean square over them of the quantization error
    and, as its verdict measured them (:class:`~onnx_precision.judge.metrics.Pool`), of the remainder's rel
    RMS err and worst slice's and of their bounds; and how far the samples' own ratios spread.

    The pooled figure is what the remainder costs. One sample's ratio also holds a redraw: rounding a
    quantizer's input to 16 bits moves some values across its rounding boundaries, each then quantized a
    step the other way, and that runs on through every later quantizer, so the remainder computes another
    draw of the quantization noise, larger or smaller on each sample. Measured on the FP8 (E4M3FN) Q/DQ ViT
    block of tests/test_fp8_remainder.py against its original, 64 samples (scripts/bench_fp8_remainder.py):
    one FP16 LayerNormalization before the quantizers moves the output by 0.77 times the quantization error,
    the whole remainder by 0.78, Q and DQ kept FP32 by 0.76; pooled, the remainder costs -2.5%, while the
    samples' ratios spread from 0.76 to 1.59 (the largest of 8 samples: 1.25 on average). INT8: +5.1%,
    0.74 to 1.64."""

    samples: int
    quantization: float
    remainder: float
    bound: float  # (1 + margin) x the quantization error, pooled as the samples' own bounds
    slice: float  # the worst slice's rel RMS err, pooled
    slice_bound: float
    low: float  # the least ratio of a sample's remainder to its quantization error
    high: float  # the largest

    @staticmethod
    def of(measured: Sequence[tuple[int, float, float]], pool: Pool) -> Pooled:
        """From (sample, quantization error, remainder) of each sample and what the verdict pooled."""
        q = np.array([e[1] for e in measured], np.float64)
        ratios = np.array([e[2] for e in measured], np.float64) / q
        return Pooled(pool.samples, float(np.sqrt(np.mean(q * q))), pool.rel_rms, pool.bound,
                      pool.slice_rel_rms, pool.slice_bound, float(np.min(ratios)), float(np.max(ratios)))

    @property
    def passed(self) -> bool:
        return bool(self.remainder <= self.bound and self.slice <= self.slice_bound)

    def text(self, errors: str) -> str:
        """'over the 8 samples together (root mean square), 16-bit remainder 0.1057 against the quantization
        error 0.1058 (0.1% under the quantization error), within its bound 0.1375: what the remainder costs;
        each sample's quantization error 0.0853 to 0.1311 and ratio 0.787 to 1.18 ...' (``errors``: the
        span of the samples' quantization errors)."""
        within = "within" if self.remainder <= self.bound else "over"
        slices = ("" if self.slice <= self.slice_bound else
                  f", its worst slices' {number(self.slice)} over their bound {number(self.slice_bound)}")
        return (f"over the {self.samples} samples together (root mean square), 16-bit remainder "
                f"{number(self.remainder)} against the quantization error {number(self.quantization)} "
                f"({_added(self.remainder, self.quantization)}), {within} its bound {number(self.bound)}"
                f"{slices}: what the remainder costs; each sample's quantization error {errors} and ratio "
                f"{number(self.low, 3)} to {number(self.high, 3)} (a redraw of the quantization noise: "
                f"rounding to 16 bits moves some quantizers' inputs across a rounding boundary)")

    def to_json(self) -> dict[str, object]:
        return {"samples": self.samples, "quantization_error": json_float(self.quantization),
                "remainder_rel_rms_err": json_float(self.remainder),
                "ratio": json_float(self.remainder / self.quantization), "bound": json_float(self.bound),
                "worst_slice_rel_rms_err": json_float(self.slice),
                "slice_bound": json_float(self.slice_bound),
                "low_ratio": json_float(self.low), "high_ratio": json_float(self.high), "passed": self.passed}


def _span(values: Sequence[float]) -> str:
    """'0.05372', or over samples that differ '0.05372 to 0.06121'."""
    low, high = number(min(values)), number(max(values))
    return low if low == high else f"{low} to {high}"


def _added(error: float, quantization: float) -> str:
    """'+3.1% over the quantization error', or '2.0% under the quantization error' (a remainder whose
    rounding happens to cancel some of the quantizers')."""
    added = 100 * (error / quantization - 1)
    return (f"{-added:.1f}% under the quantization error" if added < 0
            else f"+{added:.1f}% over the quantization error")


_T = onnx.TensorProto
# the quantized types' ranges: a bypassed quantizer keeps its clamp (quantize_static drops a Relu before
# an activation Q whose zero point clamps the negatives)
_RANGES: dict[int, tuple[int, int]] = {
    _T.INT8: (-128, 127), _T.UINT8: (0, 255), _T.INT4: (-8, 7), _T.UINT4: (0, 15),
           _T.INT16: (-32768, 32767), _T.UINT16: (0, 65535), _T.FLOAT8E4M3FN: (-448, 448),
           _T.FLOAT8E5M2: (-57344, 57344)}


def bypassed(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """``model`` with each activation ``QuantizeLinear -> DequantizeLinear`` pair (per-tensor, the Q
    reading no constant) made a clamp of the Q's input to the quantizer's range, ``Max(Min(x, hi), lo)``;
    None when it has no such pair."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    constants = {init.name: init for init in out.graph.initializer}
    made = {o: n for n in out.graph.node for o in n.output}
    nodes: list[onnx.NodeProto] = []
    for node in out.graph.node:
        dq = quantized.is_qdq(node) and node.op_type == quantized.DEQUANTIZE
        q = made.get(node.input[0]) if dq else None
        clamp = _range(q, constants) if q is not None and q.op_type == quantized.QUANTIZE else None
        if q is None or clamp is None or q.input[0] in constants:
            nodes.append(node)
            continue
        lo, hi = (f"{node.name}__lo", f"{node.name}__hi")
        out.graph.initializer.extend([numpy_helper.from_array(np.array(lo_hi, np.float32), name)
                                      for name, lo_hi in ((lo, clamp[0]), (hi, clamp[1]))])
        nodes += [helper.make_node("Min", [q.input[0], hi], [f"{node.output[0]}__min"],
                                   name=f"{node.name}__min"),
                  helper.make_node("Max", [f"{node.output[0]}__min", lo], [node.output[0]],
                                   name=f"{node.name}__bypassed")]
    if len(nodes) == len(out.graph.node):
        return None
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def _range(q: onnx.NodeProto, constants: Mapping[str, onnx.TensorProto]) -> tuple[float, float] | None:
    """The float range a per-tensor Q with constant scale and zero point keeps, else None."""
    scale = constants.get(q.input[1])
    zero = constants.get(q.input[2]) if len(q.input) > 2 and q.input[2] else None
    missing_zero = zero is None and len(q.input) > 2 and bool(q.input[2])
    if scale is None or numpy_helper.to_array(scale).size != 1 or missing_zero:
        return None
    kind = _T.UINT8 if zero is None else zero.data_type
    if kind not in _RANGES:
        return None
    s = float(numpy_helper.to_array(scale).ravel()[0])
    z = 0.0 if zero is None or kind in (_T.FLOAT8E4M3FN, _T.FLOAT8E5M2) else float(
        numpy_helper.to_array(zero).ravel()[0])
    qmin, qmax = _RANGES[kind]
    return (qmin - z) * s, (qmax - z) * s


def _signature(values: Sequence[onnx.ValueInfoProto]) -> list[tuple[str, int]]:
    return [(v.name, v.type.tensor_type.elem_type) for v in values]


def load_reference(path: str, ctx: ModelContext) -> ModelContext:
    """The unquantized model at ``path``, refused (one line) unless its inputs and outputs are the
    model's, by name and element type."""
    original = load_model(path, ctx.custom_op_libraries)
    for what, ours, theirs in (("inputs", ctx.model.graph.input, original.model.graph.input),
                               ("outputs", ctx.model.graph.output, original.model.graph.output)):
        initializers = {i.name for i in ctx.model.graph.initializer}
        mine = [s for s in _signature(ours) if s[0] not in initializers]
        theirs_initialized = {i.name for i in original.model.graph.initializer}
        other = [s for s in _signature(theirs) if s[0] not in theirs_initialized]
        if sorted(mine) != sorted(other):
            raise UsageError(f"{path}: --reference-model: its {what} ({_names(other)}) are not the model's "
                             f"({_names(mine)}): give the FP32 model the quantized one was made from")
    return original


def _names(signature: list[tuple[str, int]]) -> str:
    return ", ".join(f"{name}: {onnx.helper.tensor_dtype_to_np_dtype(t) if t else '?'}"
                     for name, t in signature) or "none"


def gate(ctx: ModelContext, feeds: Sequence[Mapping[str, np.ndarray]], tolerance: Tolerance,
         reference_model: str | None, margin: float = DEFAULT_MARGIN,
         model_outputs: Sequence[Mapping[str, np.ndarray]] | None = None) -> QuantGate | None:
    """The gate of ``ctx``'s quantized model (see the module docstring) on ``feeds`` (``model_outputs``:
    the model's FP32 outputs on them, where the caller ran it already); None for a model with nothing to
    bypass and no ``reference_model``."""
    if margin_problem(margin):
        raise UsageError(f"--quant-margin {margin}: expected {margin_problem(margin)}")
    if reference_model is not None:
        reference, source = load_reference(reference_model, ctx), reference_model
    else:
        proxy = bypassed(ctx.model) if quantized.of(ctx).qdq else None
        if proxy is None:
            return None
        reference = ModelContext.of(proxy, ctx.base_dir, ctx.path,
                                    custom_op_libraries=ctx.custom_op_libraries)
        source = BYPASSED
    return measured(ctx, QuantGate(source, reference, tolerance, margin, (), (), ()), feeds, model_outputs)


def measured(ctx: ModelContext, gate: QuantGate, feeds: Sequence[Mapping[str, np.ndarray]],
             model_outputs: Sequence[Mapping[str, np.ndarray]] | None = None) -> QuantGate:
    """``gate`` (its reference, tolerance and margin) on ``feeds``: the reference's outputs, each
    sample's quantization error (``ctx``'s model in FP32 against the reference, run here unless given as
    ``model_outputs``) and its bound."""
    from . import oracle  # the oracle stack is only needed by the measuring modes

    outputs = tuple(dict(o) for o in oracle.run_fp32(gate.reference, feeds).outputs)
    if model_outputs is None:
        model_outputs = oracle.run_fp32(ctx, feeds).outputs
    quantization: list[dict[str, float]] = []
    tolerances: list[Tolerance] = []
    for ref, out in zip(outputs, model_outputs):
        found = {m.name: m for m in compare_outputs(ref, dict(out), Tolerance(), "fp32").outputs}
        errors: dict[str, float] = {}
        judged = gate.given
        for name in (o.name for o in ctx.model.graph.output):
            m = found.get(name)
            error = m.rel_rms_err if m is not None and np.isfinite(m.rel_rms_err) else 0.0
            errors[name] = error
            if m is not None and error > 0:
                given = gate.given.for_output(name)
                judged = judged.with_output(
                    name, error_stat="rms", max_rel_rms=(1 + gate.margin) * error,
                    max_slice_rel_rms=max(given.max_slice_rel_rms, (1 + gate.margin) * m.worst_slice_rel_rms),
                    sample_ceiling=CEILING if len(feeds) > 1 else 1.0)
        quantization.append(errors)
        tolerances.append(judged)
    return replace(gate, outputs=outputs, quantization=tuple(quantization), tolerances=tuple(tolerances))
