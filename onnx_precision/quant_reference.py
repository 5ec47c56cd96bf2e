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
that reference, and a plan passes where, on each sample, its own rel RMS err against the reference is
at most ``(1 + margin)`` times that sample's (a sample the quantizers hit harder has a looser bound),
``margin`` (``--quant-margin``) 0.3 by default: the remainder may add 30% to the quantization error
(measured: an all-FP16 remainder adds 0.3% on a QDQ MLP, 18% against the original and 27% against the
bypassed model on a 4-layer ViT-like block quantized by quantize_static). Slices are judged against the
larger of the tolerance's slice bound and ``(1 + margin)`` times the sample's quantization error's worst
slice. An output the quantizers do not reach (a quantization error of 0) keeps the tolerance as given.
A model without Q/DQ pairs and without a
reference model has no gate: it is judged against itself as before.
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
from .options import DEFAULT_MARGIN as DEFAULT_MARGIN  # --quant-margin's, defined with the option (Judging)
from .options import margin_problem

BYPASSED = "the model with its activation quantizers bypassed"


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
        """One tolerance every sample's pass is within: each output's loosest bound over the samples
        (what a report states; each sample was judged by its own, at most this)."""
        judged = self.given
        for name in self.given_outputs:
            bounds = [t.for_output(name) for t, q in zip(self.tolerances, self.quantization) if q[name] > 0]
            if bounds:
                judged = judged.with_output(name, error_stat="rms",
                                            max_rel_rms=max(b.max_rel_rms for b in bounds),
                                            max_slice_rel_rms=max(b.max_slice_rel_rms for b in bounds))
        return judged

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
        """Per output the quantizers reach, the sample of ``judged`` that decides its verdict: the one whose
        remainder adds the most to its own quantization error, nearest its bound or furthest past it."""
        found: dict[str, Deciding] = {}
        for name, measured in self._measured(judged).items():
            # NaN (a remainder that is not finite) sorts as the worst
            i, q, r = max(measured, key=lambda e: e[2] / e[1] if np.isfinite(e[2]) else np.inf)
            found[name] = Deciding(i, len(self.quantization), q, r, (1 + self.margin) * q)
        return found

    def pooled(self, judged: Comparison | None) -> dict[str, Pooled]:
        """Per output the quantizers reach, its errors over the samples of ``judged`` together (two or
        more): what the remainder costs, where one sample's ratio also holds the noise of a redraw (see
        :class:`Pooled`)."""
        return {name: Pooled.of(measured) for name, measured in self._measured(judged).items()
                if len(measured) > 1}

    def to_json(self, judged: Comparison | None) -> dict[str, object]:
        """The gate as the JSON reports write it: the reference, the margin, each output's quantization
        error per sample, the sample that decides its verdict on ``judged`` (:meth:`deciding`) and the
        samples together (:meth:`pooled`)."""
        return {"reference": self.source, "margin": self.margin,
                "quantization_error": {name: [json_float(q[name]) for q in self.quantization]
                                       for name in self.given_outputs},
                "outputs": {name: d.to_json() for name, d in self.deciding(judged).items()},
                "pooled": {name: p.to_json() for name, p in self.pooled(judged).items()}}

    def notes(self, verified: Comparison | None) -> tuple[str, ...]:
        """What the remainder was judged against, and per output the quantization error, the remainder's
        (``verified``: the written model against the reference) and the bound; with several samples,
        those of the sample that decides the verdict (:meth:`deciding`)."""
        if self.given_outputs and not any(e for q in self.quantization for e in q.values()):
            # --reference-model naming the quantized model itself: there is no quantization error to
            # bound, and each output is judged by the tolerance as given (not 'not reached by the quantizers')
            return (f"quantized model: the 16-bit remainder is judged against {self.source}, which computes "
                    f"what the quantized model computes in FP32 (quantization error 0 on every output and "
                    f"sample: it is the quantized model itself), so by the tolerance as given, not by "
                    f"{1 + self.margin:g} x a quantization error",)
        head = (f"quantized model: the 16-bit remainder is judged against {self.source}: on each sample, "
                f"each output's rel RMS err may be at most {1 + self.margin:g} x that sample's quantization "
                f"error (the QDQ model in FP32 against it; --quant-margin {self.margin:g})")
        lines = [head]
        deciding, pooled = self.deciding(verified), self.pooled(verified)
        for name in self.given_outputs:
            errors = [q[name] for q in self.quantization if q[name] > 0]
            if not errors:
                lines.append(f"{name}: not reached by the quantizers (quantization error 0): judged by the "
                             f"tolerance as given")
                continue
            worst = deciding.get(name)
            count = f" on {len(self.quantization)} samples" if len(self.quantization) > 1 else ""
            ranges = (f"quantization error {_span(errors)}{count}, bound "
                      f"{_span([(1 + self.margin) * e for e in errors])}")
            if worst is None:
                lines.append(f"{name}: {ranges}")
            elif worst.samples == 1:
                lines.append(f"{name}: quantization error {number(worst.quantization)}, 16-bit remainder "
                             f"{number(worst.remainder)} ({_added(worst.remainder, worst.quantization)}), "
                             f"bound {number(worst.bound)}")
            else:
                lines.append(f"{name}: {ranges}; {worst.text()}")
            if name in pooled:
                lines.append(pooled[name].text(name))
            if max(errors) > 1:
                lines.append(self._loose(name, max(errors)))
        return tuple(lines)

    def _loose(self, name: str, error: float) -> str:
        """The note on an output whose quantization error passes the output itself."""
        return (f"{name}: its quantization error {number(error)} is larger than the output itself (rel RMS "
                f"err over 1: the QDQ model and {self.source} disagree on these samples), so a bound of "
                f"{1 + self.margin:g} x it says little of the 16-bit remainder: judge on inputs like the "
                f"quantizers' calibration data (--inputs), or check the quantization")


@dataclass(frozen=True)
class Deciding:
    """The sample that decides one output's verdict under the gate, and its figures."""

    sample: int  # its index among the samples (0-based, as the run's failures name samples)
    samples: int
    quantization: float  # its quantization error
    remainder: float  # the 16-bit remainder's rel RMS err on it
    bound: float  # (1 + margin) x quantization

    @property
    def ratio(self) -> float:
        return self.remainder / self.quantization

    @property
    def passed(self) -> bool:
        return bool(self.remainder <= self.bound)  # numpy floats give numpy bools, which JSON refuses

    def text(self) -> str:
        """'decided by sample 1, where the remainder adds the most: 16-bit remainder 0.07 against its
        quantization error 0.0543 (+28.9% over the quantization error, ratio 1.289), within its bound
        0.0706'."""
        within = "within" if self.passed else "over"
        return (f"decided by sample {self.sample}, where the remainder adds the most: 16-bit remainder "
                f"{number(self.remainder)} against its quantization error {number(self.quantization)} "
                f"({_added(self.remainder, self.quantization)}, ratio {self.ratio:.4g}), {within} its bound "
                f"{number(self.bound)}")

    def to_json(self) -> dict[str, object]:
        return {"sample": self.sample, "samples": self.samples,
                "quantization_error": json_float(self.quantization),
                "remainder_rel_rms_err": json_float(self.remainder), "ratio": json_float(self.ratio),
                "bound": json_float(self.bound), "passed": self.passed}


@dataclass(frozen=True)
class Pooled:
    """One output's errors over several samples together: the root mean square over the samples of the
    quantization error and of the remainder's rel RMS err, and how far the samples' own ratios spread.

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
    low: float  # the least ratio of a sample's remainder to its quantization error
    high: float  # the largest

    @staticmethod
    def of(measured: Sequence[tuple[int, float, float]]) -> Pooled:
        """From (sample, quantization error, remainder) of each sample."""
        q = np.array([e[1] for e in measured], np.float64)
        r = np.array([e[2] for e in measured], np.float64)
        ratios = r / q
        return Pooled(len(measured), float(np.sqrt(np.mean(q * q))), float(np.sqrt(np.mean(r * r))),
                      float(np.min(ratios)), float(np.max(ratios)))

    def text(self, name: str) -> str:
        """'over the 8 samples together (root mean square), y's 16-bit remainder 0.1057 against the
        quantization error 0.1058 (0.1% under the quantization error): what the remainder costs; ...'."""
        return (f"over the {self.samples} samples together (root mean square), {name}'s 16-bit remainder "
                f"{number(self.remainder)} against the quantization error {number(self.quantization)} "
                f"({_added(self.remainder, self.quantization)}): what the remainder costs; each sample's "
                f"ratio ({number(self.low, 3)} to {number(self.high, 3)} here) also holds a redraw of the "
                f"quantization noise (rounding to 16 bits moves some quantizers' inputs across a rounding "
                f"boundary)")

    def to_json(self) -> dict[str, object]:
        return {"samples": self.samples, "quantization_error": json_float(self.quantization),
                "remainder_rel_rms_err": json_float(self.remainder),
                "ratio": json_float(self.remainder / self.quantization),
                "low_ratio": json_float(self.low), "high_ratio": json_float(self.high)}


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
                    max_slice_rel_rms=max(given.max_slice_rel_rms, (1 + gate.margin) * m.worst_slice_rel_rms))
        quantization.append(errors)
        tolerances.append(judged)
    return replace(gate, outputs=outputs, quantization=tuple(quantization), tolerances=tuple(tolerances))
