"""When does an FP16 output pass? The acceptance of one output's metrics under the tolerance.

The default check, ``rms``, tells FP16 *breakage* from FP16 *rounding noise*. An output passes when:

* no NaN/Inf appears where FP32 is finite (overflow is never within tolerance);
* its relative RMS error ``‖cand − ref‖ / ‖ref‖`` is at most ``max_rel_rms`` (0.05);
* the relative RMS error of every *slice* is at most ``max_slice_rel_rms`` (0.2). Slices are
  consecutive whole rows of the output's last axis (size-1 axes ignored), at least 32 elements
  each: a ``[64, D]`` output has 64 slices when D >= 32, a ``[1, 1, 256, 256]`` map 256 rows of
  256, a ``[B, H, S, S]`` attention one slice per query row. A slice's error is judged against
  the larger of its own RMS and the whole output's RMS, so a row that is mostly background is
  held to the output's scale, not to its own near-zero values;
* or, whatever the relative errors, every element is within ``atol`` (outputs that are ~0), where the
  candidate keeps the reference's signal (:func:`signal_lost`): not one value throughout (all zero, say)
  where the reference is not, and its relative RMS error, over the output and every slice, below 1 (no
  closer to FP32 than all zeros would be). A 151 936-wide Softmax whose FP16 denominator overflows gives
  all zeros, every |err| under 1.2e-5: its whole signal lies under ``atol``, and it fails. The same holds
  in every check: ``atol`` in a bound (``max``, ``elemwise``) passes no output that lost its signal where
  ``rtol`` alone fails it. An output whose FP32 values are themselves rounding noise, smaller than FP16's
  error on them (a difference of two equal sums), fails too: its candidate is no closer to them than zeros.

Why these numbers (emulated all-FP16 against FP32; ``scripts/verdict_measurements.py`` prints
them). FP16 rounding noise, which must pass; "max" is the criterion before ``rms``:

==================================================  =============  ===========  ===========  ========
network (output)                                    rel RMS        worst slice  max |err|    "max"
==================================================  =============  ===========  ===========  ========
PP-OCRv4 text detection (trained), 9 maps 256-640   0.0025-0.0093  0.020-0.047  0.036-0.156  FAIL 9/9
PP-OCRv4 recognition (trained), 9 lines x 6625      0.0047-0.0131  0.011-0.038  0.007-0.026  FAIL 7/9
PP-OCR direction classifier (trained), batch of 8   0.0008         0.0008       0.0015       pass
models/deep_cnn (42 convs, sigmoid map)             0.0092         0.023        0.126        FAIL
12-layer encoder (models.transformer, clean)        0.0021         0.0025       0.0085       pass
one token's logits near 300 (spacing 0.25)          0.0058         0.091        0.129        FAIL
==================================================  =============  ===========  ===========  ========

Breakage, which must fail: whole outputs broken (the examples in ``models/``: relative RMS 0.33
to 1.3, or NaN/Inf), and breakage confined to a small part of a large output
(``models.breakages``), where the whole-output error stays small but one slice's does not:

==================================================  ========  ============  ========
breakage                                            rel RMS   worst slice   "max"
==================================================  ========  ============  ========
one row of 64 zeroed (its L2 norm overflows)        0.125     1.0           FAIL
one row of 1024 zeroed                              0.031     1.0           FAIL
one token's attention saturated (logits near 4000)  0.030     0.45-0.51     FAIL
one token's attention collapsed (logits near 3e4)   0.066     0.92-0.98     FAIL
one LayerNorm row of 16 collapsed (x near 1000)     0.26      0.99          FAIL
one NaN in 1024 elements                            (1 new NaN)             FAIL
==================================================  ========  ============  ========

So the noise stays under both bounds with margin (whole output <= 0.0131 against 0.05: 3.8x;
slices <= 0.091 against 0.2: 2.2x) and every breakage is 2.2x or more over one of them (or
non-finite). 0.05 is about the cosine floor of the "max" check (cosine 0.999 is a relative RMS
error of 0.045 orthogonal to the output) but also sees an output scaled wrong. The logits near
300 are rounded by up to 0.125 (FP16's spacing there is 0.25): that is rounding noise, the same
TensorRT's FP16 gives, and it passes; near 4000 the rounding reaches 1 and the row saturates.

Elements are not judged one by one by default: a network whose logits carry a relative FP16 error
of a few 1e-3 at magnitudes in the hundreds moves them by 0.4 here and there, and where a sigmoid
is steep (slope 0.25) that is a probability error of 0.1 at a few pixels (the "max" check fails
the OCR detector above on 83-118 of 65 536 pixels, 0.1-0.2%, of which 2-5 cross 0.3); errors that
flow through sums also land on elements near zero. The count of elements outside
``atol + rtol·|ref|`` (numpy's ``isclose`` with the FP32 value as reference; Polygraphy's
elementwise check passes an element within *either* bound, which differs by at most 2x) is
reported and can be the check (``elemwise``).

The other checks, after Polygraphy's ``--check-error-stat``, all require no new NaN/Inf:

* ``max``: ``max|err| <= atol + rtol·max|ref|`` and cosine ``>= min_cosine``: the criterion of
  versions before the ``rms`` default;
* ``mean`` / ``median`` / ``quantile``: the same with the mean, median or ``error_quantile``
  quantile of ``|err|`` in place of the max;
* ``elemwise``: at most ``max_outside_fraction`` (default 0) of the elements outside
  ``atol + rtol·|ref|``.

Task-aware checks come on top for outputs whose meaning the user knows: ``top_k`` (the share of
rows along the last axis whose FP32 top-1 class is among the candidate's top k must be at least
``min_top_k_agreement``) and ``threshold`` (the IoU of ``{x > threshold}`` must be at least
``min_iou``). Every setting can differ per output (``per_output``).

Where FP32 itself is non-finite the FP32 model is at fault, not FP16: such an output fails unless
``allow_fp32_nonfinite``, which compares only where FP32 is finite.

Over several samples a tolerance may hold its ``rms`` bounds over the samples together
(``sample_ceiling`` above 1: a quantized model's gate, where each sample's error is the quantization noise
drawn again): :func:`judged` holds each sample alone to ``sample_ceiling`` times its own bounds, and
:func:`pooled`, when the samples' comparisons are merged, holds the root mean square over them of the rel
RMS err (and of the worst slice's) to that of their own bounds.

A pass is *thin* (:func:`room`, :func:`thin_pass_note`) when the clause that decided it is within
10% of its bound (rel RMS err 0.0451 against 0.05): a pitch tracker that passed so on one sample
failed at 0.163 on the same audio at 10% volume. Bounds of the form "at least" (cosine, top-k
agreement, IoU) are measured by what they leave to 1 (cosine 0.9991 against 0.999 leaves 0.0009
of 0.001: 10% room). Where two clauses can pass an output (``rms``: the relative errors, or every
element within ``atol``) the one with more room decides; the task checks apply to both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..format import number
from .metrics import Comparison, OutputMetrics, Pool
from .settings import Tolerance, clauses
from .statistics import Check, Term, room_share, statistic

# A pass with less than this share of its bound left says so: another input can tip it.
THIN = 0.1


def signal_lost(m: OutputMetrics) -> str:
    """How the candidate of output ``m`` has lost the reference's signal, in words; "" where it has not
    (or the reference has none: it is all zero). Lost: the candidate is one value throughout (all zero,
    say) where the reference is not, or its relative RMS error over the output or a slice is 1 or more:
    no closer to the reference than all zeros would be."""
    if m.ref_max_abs == 0:
        return ""
    if m.cand_max_abs == 0:
        return f"every element is 0 where FP32's reach {number(m.ref_max_abs)}"
    if m.flat:
        return f"every element is one value where FP32's vary (|ref| up to {number(m.ref_max_abs)})"
    worst = max(m.rel_rms_err, m.worst_slice_rel_rms)
    if worst >= 1:
        where = "" if m.rel_rms_err >= 1 else f" of the slice at {m.name}{list(m.worst_slice_at)}"
        return f"rel RMS err{where} {number(worst)} >= 1, no closer to FP32 than all zeros"
    return ""


def atol_floor(m: OutputMetrics, tol: Tolerance) -> bool:
    """Whether "all |err| <= atol" passes output ``m`` (a statistic it can pass, :attr:`.statistics.
    ErrorStatistic.atol_passes`): every |err| within ``atol``, and the candidate keeps the reference's
    signal (:func:`signal_lost`). An output whose whole signal lies under ``atol`` (a 151 936-wide
    Softmax's probabilities, all about 7e-6) is judged by its relative errors: all zero, it is broken
    whatever its absolute error."""
    return statistic(tol).atol_passes and m.max_abs_err <= tol.atol and not signal_lost(m)


def passed_by(m: OutputMetrics, tol: Tolerance) -> str:
    """The clause under which output ``m`` passes (it passes: :func:`failures` found nothing): reports
    name it, since a pass through "all |err| <= atol" says nothing of the relative error."""
    main, escape = clauses(tol)
    return escape if atol_floor(m, tol) else main


def failures(m: OutputMetrics, tol: Tolerance) -> tuple[str, ...]:
    """Why output ``m`` fails under ``tol`` (already chosen for this output): () when it passes.

    ``atol`` is a floor under which errors do not count, for outputs that are about 0; it passes no output
    whose candidate has lost the reference's signal (:func:`signal_lost`), in any clause: not through
    "all |err| <= atol" (:func:`atol_floor`), nor through the atol term of an |err| or elementwise bound
    (where the relative part alone, ``rtol``, fails it). A relative bound that holds passes it still (rel
    RMS err 1.2 under --max-rel-rms 2)."""
    out: list[str] = []
    if m.fp32_nonfinite and not tol.allow_fp32_nonfinite:
        out.append(f"the FP32 output itself has {m.fp32_nonfinite} NaN/Inf (--allow-fp32-nonfinite "
                   f"compares only where it is finite)")
    if m.new_nonfinite:
        out.append(f"{m.new_nonfinite} new NaN/Inf")
    row = statistic(tol)
    if not atol_floor(m, tol):
        failed = [c.failure for c in row.checks(m, tol) if not c.holds]
        lost = signal_lost(m)
        said = f"signal lost: {lost}; atol {tol.atol:g} passes no output that lost its signal"
        if lost and failed and row.atol_passes and m.max_abs_err <= tol.atol:
            failed.insert(0, said)  # "all |err| <= atol" would have passed it
        elif lost and not failed and not all(c.holds for c in row.checks(m, replace(tol, atol=0.0))):
            failed = [said]  # the atol term of its bound passed it, the relative part alone fails it
        out += failed
    out += [t.failure for t in m.tasks if not t.passed]
    return tuple(out)


def judged(m: OutputMetrics, tol: Tolerance) -> OutputMetrics:
    """Output ``m`` (one sample's) with its verdict under ``tol`` (already chosen for this output): its
    failures, or the clause it passes under and its room. Where ``tol``'s rms bounds hold over the samples
    together (``sample_ceiling`` above 1) the sample alone is held to the ceiling, and its part in the
    bounds (:class:`.metrics.Pool`) is kept for the merge of the samples, which judges them
    (:func:`pooled`)."""
    pool = None
    if tol.sample_ceiling != 1 and "max_rel_rms" in statistic(tol).settings:
        error, slice_error = m.rel_rms_err, m.worst_slice_rel_rms
        if atol_floor(m, tol):  # its errors do not count: at most its own bounds
            error, slice_error = min(error, tol.max_rel_rms), min(slice_error, tol.max_slice_rel_rms)
        ceiling = tol.sample_ceiling
        pool = Pool(1, ceiling, error, tol.max_rel_rms, slice_error, tol.max_slice_rel_rms)
        tol = replace(tol, max_rel_rms=ceiling * tol.max_rel_rms,
                      max_slice_rel_rms=ceiling * tol.max_slice_rel_rms, sample_ceiling=1.0)
    why = failures(m, tol)
    if why:
        return replace(m, failures=why, pool=pool)
    share, clause = room(m, tol)
    return replace(m, passed=True, passed_by=passed_by(m, tol), room=share, room_clause=clause, pool=pool)


def pooled(merged: OutputMetrics, group: Sequence[OutputMetrics]) -> OutputMetrics:
    """``merged`` (the worst case of ``group``, one output's metrics on several samples) judged by the
    bounds the samples whose tolerance pools them hold together (:func:`judged`; any other sample is
    judged alone, as it was): it fails where the root mean square over them of its rel RMS err or of its
    worst slice's passes that of their own bounds. A pass's room and clause are the pool's: a sample's
    ceiling catches breakage, the pool is the bound."""
    pools = [m.pool for m in group if m.pool is not None]
    if not pools:
        return merged
    pool = Pool.merged(pools)
    checks = _pool_checks(pool)
    failed = tuple(c.failure for c in checks if not c.holds)
    if failed or not merged.passed:
        return replace(merged, pool=pool, passed=False, passed_by="", room=math.inf, room_clause="",
                       failures=merged.failures + failed)
    share, clause = min(c.term for c in checks)
    together = f" over the {pool.samples} samples together (root mean square)" if pool.samples > 1 else ""
    passed = (f"rel RMS err <= {number(pool.bound)}, every slice <= {number(pool.slice_bound)}{together}, "
              f"each sample within {pool.ceiling:g} x its own")
    return replace(merged, pool=pool, passed_by=passed, room=share, room_clause=clause)


def _pool_checks(pool: Pool) -> tuple[Check, Check]:
    together = f" over the {pool.samples} samples together" if pool.samples > 1 else ""
    mean = " (root mean square)" if pool.samples > 1 else ""
    return (Check(pool.rel_rms, pool.bound, pool.rel_rms <= pool.bound,
                  f"rel RMS err{together}{mean} {number(pool.rel_rms)} > {number(pool.bound)}",
                  f"rel RMS err{together} {number(pool.rel_rms)} against {number(pool.bound)}"),
            Check(pool.slice_rel_rms, pool.slice_bound, pool.slice_rel_rms <= pool.slice_bound,
                  f"worst slice rel RMS err{together}{mean} {number(pool.slice_rel_rms)} > "
                  f"{number(pool.slice_bound)}",
                  f"worst slice rel RMS err{together} {number(pool.slice_rel_rms)} against "
                  f"{number(pool.slice_bound)}"))


def room(m: OutputMetrics, tol: Tolerance) -> Term:
    """How near passing output ``m`` came to failing under ``tol``: the share of its bound left by
    the clause nearest its bound among those that decided the pass (of two ways to pass, the one
    with more room), and that clause as measured ("rel RMS err 0.0451 against 0.05"); (inf, "")
    where no bound applied measures it (a bound of 0: an exact match)."""
    row = statistic(tol)
    main = [c.term for c in row.checks(m, tol)]
    ways = [main]
    if atol_floor(m, tol):
        escape = (room_share(m.max_abs_err, tol.atol), f"max abs err {number(m.max_abs_err)} against atol "
                                                          f"{tol.atol:g}")
        ways = [[escape]] + ([main] if all(share >= 0 for share, _ in main) else [])
    tasks = [(room_share(1.0 - t.agreement, 1.0 - t.minimum), f"{t.label} {t.agreement:.6g} against "
                                                               f"{t.minimum:g}")
             for t in m.tasks]
    decided = max((min(way, default=_NO_BOUND) for way in ways), default=_NO_BOUND)
    return min([decided, *tasks])


_NO_BOUND: Term = (math.inf, "")


def thin_pass_note(judged: Sequence[Comparison], remedy: str,
                   relative: Mapping[str, float] | None = None) -> str:
    """What a pass of ``judged`` (comparisons that all pass) rests on, when it is little: an output
    within :data:`THIN` of a bound, or a single sample; "" otherwise. ``remedy``: how to get more
    samples with the command that judged. ``relative``: the outputs whose rel RMS bound is
    (1 + margin) x their quantization error (a quantized model's gate), with that margin."""
    outputs = [m for c in judged for m in c.outputs if m.passed]
    thinnest = min(outputs, key=lambda m: m.room, default=None)
    samples = sum(c.samples for c in judged)
    parts = []
    if thinnest is not None and thinnest.room < THIN:
        parts.append(f"output '{thinnest.name}' passes within {100 * THIN:g}% of "
                     f"{_bound(thinnest.name, thinnest.room_clause, relative or {})}")
    if samples == 1:
        parts.append("judged on 1 sample" if parts else "the pass was judged on 1 sample")
    return f"{', '.join(parts)}: other inputs may fail; {remedy}" if parts else ""


def _bound(name: str, clause: str, relative: Mapping[str, float]) -> str:
    """'a bound (rel RMS err 0.0451 against 0.05)', or where the bound is relative to the quantization
    error, 'the bound (1 + 0.3) x the quantization error 0.0543 = 0.0706 (rel RMS err 0.068)'."""
    measured, _, bound = clause.rpartition(" against ")
    if name not in relative or not measured.startswith("rel RMS err "):
        return f"a bound ({clause})"
    margin = relative[name]
    return (f"the bound (1 + {margin:g}) x the quantization error {number(float(bound) / (1 + margin))} = "
            f"{number(float(bound))} ({measured})")
