"""``check``: does a candidate FP16 / mixed-precision model stay within tolerance of its FP32 model?

A pre-deployment gate for any candidate, also one made by another tool. The default oracle
*emulates* FP16 on CPU (:func:`onnx_precision.oracle.emulate_model`: the candidate's FP16 tensors
rounded through float16 inside an FP32 graph), because onnxruntime's CPU provider would run the
FP16 model in FP32 and hide every overflow. ``cuda`` / ``tensorrt`` run the candidate natively on
that provider instead (onnxruntime-gpu needed). The result always says which oracle produced it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from .basis import Basis, generation_of, measure, measured_model, run_samples, unused_generation
from .context import ModelContext, load_model
from .coverage import unrun_bodies, unrun_note
from .data import Samples, SampleSpec, command_spec
from .errors import InternalError, ModelLoadError, PrecisionError, ReferenceFailure, UsageError
from .float_types import LOW_TYPES, low_of
from .flops import flop_shares
from .format import json_safe, percent
from .judge import Comparison, OutputMetrics, Tolerance, compare_samples, merge_comparisons, thin_pass_note
from .judge.metrics import named_samples
from .options import Composed, GenerationOptions, Judging
from .options import model_path as model_path_of
from .plan import NodeDecision, Precision, PrecisionPlan
from .runtimes import RuntimeTable, judged_as
from .runtimes import judge as judge_runtimes
from .storage import read_array
from .target import Targeting
from .tradeoff import worst_output_text
from .typing_rules import elem_type
from .typing_rules.inference import weightless
from .vocab import OracleName

if TYPE_CHECKING:
    from .generation.verdict import GenerationVerdict

CHECK_FORMAT = "onnx-precision-check/1"


class FP32NonFinite(PrecisionError):
    """The FP32 model's outputs are NaN/Inf on the samples: FP16 is not to blame (exit 1, as convert)."""

    exit_code = 1


# Type conversions and values compute nothing: a model whose only 16-bit nodes are these (an FP32
# model with FP16 inputs and outputs cast at its edges) computes in FP32.
_NO_COMPUTE = frozenset({"Cast", "CastLike", "Constant"})


@dataclass(frozen=True)
class LowCompute:
    """Why a node computes in 16 bits: the first 16-bit tensor it reads or writes."""

    precision: str  # "fp16" | "bf16"
    tensor: str
    reads: bool  # an input (else an output)

    def __str__(self) -> str:
        return f"{'reads' if self.reads else 'writes'} {low_of(self.precision).type_name} '{self.tensor}'"


def low_compute(ctx: ModelContext) -> dict[str, LowCompute]:
    """Every node that computes in 16 bits, with why: a node (of any domain, subgraphs included)
    other than Cast, CastLike and Constant with a float16 or bfloat16 tensor among its inputs or
    outputs (initializers included)."""
    found = {ref.name: _low_tensor(ctx, ref.node) for ref in ctx.nodes
             if not (ref.node.op_type in _NO_COMPUTE and ref.node.domain in ("", "ai.onnx"))}
    return {name: why for name, why in found.items() if why is not None}


def _low_tensor(ctx: ModelContext, node: onnx.NodeProto) -> LowCompute | None:
    """The first float16 or bfloat16 tensor ``node`` reads, else writes; None where there is none."""
    for reads, names in ((True, node.input), (False, node.output)):
        low = [LowCompute(LOW_TYPES[t].precision, n, reads) for n in names
               if (t := elem_type(ctx.types.get(n))) in LOW_TYPES]
        if low:
            return low[0]
    return None


def written_plan(ctx: ModelContext, original: ModelContext) -> PrecisionPlan:
    """The written model ``ctx`` as a plan, for its shares (:func:`..flops.flop_shares`, as ``convert``
    counts its plans): each node in the precision it computes in, 16-bit where it reads or writes a
    16-bit tensor (:func:`low_compute`; a Cast of ``original``'s own likewise); the Casts ``original``
    does not have are a conversion's, between precisions, and compute nothing of the model's."""
    own = set(original.node_ops)
    decisions = {}
    for ref in ctx.nodes:
        if ref.node.op_type in ("Cast", "CastLike") and ref.name not in own:
            continue
        low = _low_tensor(ctx, ref.node)
        decisions[ref.name] = NodeDecision(Precision(low.precision) if low else Precision.FP32)
    fp16_io = any(elem_type(v.type) in LOW_TYPES for v in ctx.model.graph.input)
    return PrecisionPlan(decisions, fp16_io)


def require_fp32_reference(ctx: ModelContext, role: str, remedy: str) -> None:
    """Refuse ``ctx`` as the FP32 model a 16-bit one is measured against when it computes in 16 bits
    itself (:func:`low_compute`): every error would be measured against 16-bit arithmetic (against
    itself, for an FP16 model: every error 0). ``role`` names the model, ``remedy`` what to do."""
    low = low_compute(ctx)
    if low:
        name, why = next(iter(low.items()))
        more = f", and {len(low) - 1} more node(s)" if len(low) > 1 else ""
        raise UsageError(f"{ctx.path}: {role} computes in 16 bits (node '{name}' ({ctx.node_ops[name]}) "
                         f"{why}{more}), so it is no FP32 reference; {remedy}")


def low_share(ctx: ModelContext, original: ModelContext, feed: Mapping[str, np.ndarray],
              ) -> tuple[str, float, str]:
    """What the written model ``ctx``'s 16-bit nodes are ("FP16", "BF16", "16-bit" where both; "" where
    none computes in 16 bits), their share of the estimated FLOPs (at ``feed``'s shapes) and what that
    share is of, counted as ``convert`` counts it (:func:`..flops.flop_shares` of :func:`written_plan`:
    the Casts ``original`` has not left out, quantized compute apart)."""
    plan = written_plan(ctx, original)
    shares = flop_shares(ctx, {k: np.shape(v) for k, v in feed.items()}, feed)
    precisions = {p for p in shares.precisions(plan).values() if p.is_low}
    label = "16-bit" if len(precisions) > 1 else precisions.pop().name if precisions else ""
    return label, shares.low(plan), shares.of


def _require_distinct(reference: ModelContext, candidate: ModelContext) -> None:
    """Refuse a candidate that is the reference file itself, or a copy of it (another file with the same
    graph and weights: a gate that passes it passes a pipeline whose conversion wrote nothing new). A
    candidate with no 16-bit compute that differs from the reference is checked, and warned of."""
    if os.path.samefile(reference.path, candidate.path):
        raise UsageError(f"{candidate.path}: the candidate is the FP32 model {reference.path} itself (the "
                         f"same file); check compares a 16-bit candidate with its FP32 model")
    if _same_graph_and_weights(reference, candidate):
        raise UsageError(f"{candidate.path}: the candidate has the graph and weights of the FP32 model "
                         f"{reference.path} (a copy: nothing in it computes in 16 bits); check compares a "
                         f"16-bit candidate with its FP32 model")


def _same_graph_and_weights(a: ModelContext, b: ModelContext) -> bool:
    """Whether ``b`` holds ``a``'s graph, functions and weights, its file, metadata, producer and opset aside:
    the graphs alike without their large weights' values, then those values alike, bit for bit."""
    shells = weightless(a.model), weightless(b.model)
    if len({(s.graph.SerializeToString(), tuple(f.SerializeToString() for f in s.functions))
            for s in shells}) > 1:
        return False
    pairs = zip(a.model.graph.initializer, b.model.graph.initializer)
    return all(_same_values(read_array(x, a.base_dir), read_array(y, b.base_dir)) for x, y in pairs)


def _same_values(x: np.ndarray, y: np.ndarray, step: int = 1 << 24) -> bool:
    """Bit for bit (a NaN is its own), a slice at a time: a mapped weight is never read whole."""
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if x.dtype == object:  # strings
        return bool(np.array_equal(x, y))
    a, b = x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8)
    return all(np.array_equal(a[i:i + step], b[i:i + step]) for i in range(0, a.size, step))


@dataclass(frozen=True)
class CheckResult:
    model: str
    candidate: str
    comparison: Comparison
    basis: Basis  # what the candidate was judged by: the samples, the reference, the tolerances
    target: str = "generic"  # what the emulation followed ("generic" or "tensorrt X.Y")
    low_label: str = ""  # what the candidate's 16-bit nodes are: FP16, BF16, 16-bit (both), "" (none)
    low_share: float = 0.0  # the candidate's 16-bit share of estimated FLOPs (:func:`low_share`)
    warnings: tuple[str, ...] = ()  # the check's own (the samples' are in ``samples.warnings``)
    low_share_of: str = "of estimated FLOPs"  # what low_share is of (the non-quantized FLOPs, when quantized)
    target_source: str = ""  # why that target: given, recorded in the candidate, or the default
    runtimes: RuntimeTable | None = None  # the candidate emulated on every runtime of the registry
    # a decoder's or streaming model's: the candidate over the generation (its failing step, bound, tokens)
    generation: GenerationVerdict | None = None
    unrun: str = ""  # the bodies of the candidate's control flow no sample runs (coverage.unrun_note)

    @property
    def passed(self) -> bool:
        """Within tolerance (over every step of a generation, which also holds to its --max-length)."""
        return self.comparison.passed and (self.generation is None or self.generation.holds)

    @property
    def samples(self) -> Samples:
        return self.basis.samples

    @property
    def tolerance(self) -> Tolerance:
        """The tolerance the check states (every sample's is within it)."""
        return self.basis.tolerance

    @property
    def quant_notes(self) -> tuple[str, ...]:
        """A quantized model's: what the candidate was judged against, each output's quantization error and
        bound (:meth:`.quant_reference.QuantGate.notes`)."""
        return self.basis.notes(self.comparison)

    @property
    def all_warnings(self) -> tuple[str, ...]:
        return self.warnings + tuple(self.samples.warnings)

    def verdict_line(self) -> str:
        """The one line ``check -q`` prints: the verdict, what changes what it means (a target other than
        generic, and why that one; data the run made up), the worst output and its statistic, and the
        candidate's 16-bit share."""
        share = f"{self.low_label}: {percent(self.low_share)} {self.low_share_of}" if self.low_label else \
            "no 16-bit compute"
        why = self.target_source.split(",")[0]  # "recorded in the candidate", "given"
        under = f" under {self.target} ({why})" if self.target != "generic" else ""
        made_up = " on synthetic data (no --inputs)" if self.samples.synthetic else ""
        return (f"{self.candidate} against {self.model}: {'passed' if self.passed else 'failed'}{under}"
                f"{made_up}; {worst_output_text(self.comparison, self.tolerance)}; {share}")

    def to_json(self, tol: Tolerance) -> dict:
        """The result as ``check --json`` writes it: format ``onnx-precision-check/1``, the two
        models, the oracle and target, the samples, the tolerance (as ``convert``'s report writes
        it) and the comparison (per output every statistic, its verdict and the clause that passed
        it, or its failures; ``by_shape`` where the samples have several shapes)."""
        return json_safe({
            "format": CHECK_FORMAT, "model": self.model, "candidate": self.candidate, "passed": self.passed,
            "oracle": self.oracle, "target": self.target, "target_source": self.target_source,
            "runtimes": None if self.runtimes is None else self.runtimes.to_json(),
            "samples": {"source": self.samples.source, "synthetic": self.samples.synthetic,
                        "count": len(self.samples.feeds), "warnings": list(self.samples.warnings)},
            "tolerance": tol.to_json(), "comparison": self.comparison.to_json(), "note": self.note or None,
            "low_share": {"label": self.low_label or None, "flops": self.low_share,
                          "flops_of": self.low_share_of[len("of "):]},  # as convert's fp16_share.flops_of
            "warnings": list(self.warnings), "unrun": self.unrun or None,
            **({"generation": self.generation.to_json()} if self.generation is not None else {}),
            **({"quantization_gate": gate} if (gate := self.basis.to_json(self.comparison)) else {})})

    @property
    def oracle(self) -> str:
        return self.comparison.oracle

    def detail_lines(self, tol: Tolerance) -> list[str]:
        """More for ``check -v``: the tolerance, and per output where its worst slice is, its
        elements outside the element bound, and every reason it fails."""
        out = [f"tolerance: {tol.describe()}"]
        for m in self.comparison.outputs:
            where = f" at index {list(m.worst_slice_at)}" if m.worst_slice_at else ""
            out.append(f"  {m.name}: {m.elements} elements compared ({m.fp32_nonfinite} left out: FP32 "
                       f"non-finite), {m.slices} slice(s), the worst{where} ({m.worst_slice_size} elements); "
                       f"{m.outside_bound} outside atol + rtol x |ref|")
            out += [f"    fails: {why}" for why in m.failures]
            out += [f"    task: {t.summary()}" for t in m.tasks]
        return out

    def lines(self) -> list[str]:
        """Per-output metrics and the verdict, for the terminal."""
        out = [f"check {self.candidate} against {self.model}",
               f"oracle: {_oracle_text(self.oracle)}; target: {self.target} ({self.target_source})",
               f"samples: {len(self.samples.feeds)} ({self.samples.source})"]
        listed = self._listed()
        out += [f"  {m.name}: {m.summary()}  {m.verdict()}" for m in listed]
        if len(listed) < len(self.comparison.outputs):
            out.append(f"  ({len(self.comparison.outputs)} outputs compared over the generation's steps; -v "
                       f"lists each)")
        out += [f"runtimes: {self.runtimes.line()}"] if self.runtimes is not None else []
        out += self.generation.lines() if self.generation is not None else []
        out.append(self._closing())
        notes = (*self.quant_notes, self.unrun, self.note)
        return out + [f"note: {n}" for n in notes if n]

    def _closing(self) -> str:
        """The verdict's line: where the candidate's run stopped on a sample (a flipped decision changed its
        shapes: :func:`.oracle.verify.stopped_apart`), that, and what the samples compared came to."""
        if self.passed:
            return "PASS: within tolerance"
        stops = sorted({i for m in self.comparison.outputs for i in m.not_compared})
        if not stops:
            return "FAIL: out of tolerance or non-finite"
        ran = [c for i, c in enumerate(self.comparison.per_sample) if i not in stops]
        rest = "" if not ran else "; the samples compared are " + (
            "within tolerance" if merge_comparisons(ran, self.oracle).passed
            else "out of tolerance or non-finite")
        return (f"FAIL: the candidate's run stops on {named_samples(stops)} (a flipped decision changed its "
                f"shapes){rest}")

    def _listed(self) -> list[OutputMetrics]:
        """The outputs the terminal lists: each; a generation's, its first failing step's output or its
        worst (one row for each of K + 1 steps says less than the one that decides)."""
        outputs = list(self.comparison.outputs)
        if self.generation is None:
            return outputs
        first = next((m for m in outputs if not m.passed), self.comparison.worst())
        return [first] if first is not None else []

    @property
    def note(self) -> str:
        """What a pass rests on, when it is little: a bound nearly reached, or one sample."""
        return thin_pass_note((self.comparison,), "more samples: --inputs DIR with several .npz",
                              self.basis.relative) if self.passed else ""


@dataclass(frozen=True, init=False)
class CheckOptions(Composed):
    """``check``'s options: the groups it shares with ``convert`` and ``analyze`` (:mod:`.options`), so it
    judges by what they judge by, and the oracle that runs the candidate. A group's field may be given by
    its own name: ``CheckOptions(tolerance=..., target=...)``."""

    samples: SampleSpec = field(default_factory=SampleSpec)
    judging: Judging = field(default_factory=Judging)
    targeting: Targeting = field(default_factory=Targeting)
    generation: GenerationOptions = field(default_factory=GenerationOptions)
    oracle: OracleName = "emulate"
    # a generic target (the default) gives way to the one the candidate records (runtimes.judged_as); the
    # command line says False where --target names it
    recorded_target: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", command_spec(self.samples, self.judging.memory_budget))


def check(model_path: str, candidate_path: str, spec: SampleSpec | None = None,
          tol: Tolerance | None = None, oracle: OracleName = "emulate", **options: Any) -> CheckResult:
    """Compare ``candidate_path`` with the FP32 ``model_path`` on the samples of ``spec``, by ``tol``, the
    candidate run on ``oracle``; ``options``: the rest of :class:`CheckOptions`, a group whole
    (``judging=``, ``targeting=``) or its fields by name (``target=``, ``custom_op_libraries=``,
    ``reference_model=``, ``quant_margin=``, ``keep_opset=``, ...), as ``convert`` takes them.

    The candidate is judged as ``convert`` judges the model it writes, by the basis ``convert`` measures
    on the same model, samples and options (:func:`.basis.measure`): ``model_path`` as the run measures it
    (:func:`.basis.measured_model`: loaded for the target, a BF16 run's opset raised), the sums the
    samples prove in range emulated unchecked, and a quantized model judged against its unquantized
    original or the model with its activation quantizers bypassed, each sample's bound relative to its
    quantization error (:mod:`.quant_reference`). The custom-op libraries are registered on every
    onnxruntime session of either model."""
    from . import oracle as oracle_lib  # heavy: onnxruntime

    model_path = model_path_of(model_path, "model", " (check reads files: onnx.save it first)"
                               if isinstance(model_path, onnx.ModelProto) else "")
    candidate_path = model_path_of(candidate_path, "candidate", " (check reads files: onnx.save it first)"
                                   if isinstance(candidate_path, onnx.ModelProto) else "")
    given = CheckOptions(samples=SampleSpec() if spec is None else spec, oracle=oracle,
                         **({} if tol is None else {"tolerance": tol}), **options)
    spec, judging = given.samples, given.judging
    judging_target = judged_as(candidate_path, given.targeting.target, given.recorded_target)
    targeting = replace(given.targeting, target=judging_target.target)
    tol, libraries, target = judging.tolerance, targeting.custom_op_libraries, targeting.target
    oracle_lib.require_oracle(given.oracle)
    reference = measured_model(partial(load_model, model_path, libraries), targeting, judging, spec)
    require_fp32_reference(reference, "the reference", "give the FP32 model first: onnx-precision check "
                                                       "FP32_MODEL CANDIDATE")
    candidate = load_model(candidate_path, libraries, target)
    _check_outputs_match(reference.model, candidate.model, model_path, candidate_path)
    tol.require_outputs([o.name for o in reference.model.graph.output], model_path)
    # a decoder's or a streaming model's samples run over its generation, as convert judges it
    generation = generation_of(reference, given.generation)
    samples = run_samples(reference, spec, generation)

    with oracle_lib.blame(reference, samples):
        basis = measure(reference, samples, judging)
    if not tol.allow_fp32_nonfinite:
        _refuse_fp32_nonfinite(reference, basis.forward, basis.references)
    # after the reference ran: what is wrong with the model (or the samples) is the first thing to say
    _require_distinct(reference, candidate)
    found = None
    plan = written_plan(candidate, reference)  # where its run stops, which decision of the model flipped
    try:
        if basis.generation is None:
            cands = oracle_lib.run_candidate(candidate, samples.feeds, given.oracle, basis.measured)
            comparison = compare_samples(basis.references,
                                         oracle_lib.verify.only_reference_outputs(cands, basis.references),
                                         basis.tolerances, cands.oracle)
        else:
            comparison, found = _judge_generation(reference, candidate, basis, given.oracle)
    except ReferenceFailure as e:  # onnx.reference's own: on the candidate only, or the FP32 model too
        raise _reference_failure(e, reference, candidate, samples.feeds[:1]) from e
    except Exception as e:
        if not oracle_lib.is_ort_error(e):
            raise
        # a sample on which a decision flips in the candidate, and the shapes after it no longer fit together
        stopped = None if given.oracle != "emulate" or basis.generation is not None else (
            oracle_lib.verify.stopped_apart(
                lambda feeds: oracle_lib.run_candidate(candidate, feeds, "emulate", basis.measured),
                oracle_lib.Emulator(reference), plan, samples.feeds, basis.references, basis.tolerances, e))
        if stopped is None:
            # onnxruntime rejects the candidate (shapes, types, ops): the user's input, made by any tool
            raise ModelLoadError(f"{candidate_path}: onnxruntime cannot run the candidate on the samples: "
                                 f"{oracle_lib.ort_message(e)}") from e
        comparison = merge_comparisons(stopped, oracle_lib.EMULATE)
    forward = basis.forward.feeds
    label, share, share_of = low_share(candidate, reference, forward[0] if forward else {})
    lows = {name: Precision(why.precision) for name, why in low_compute(candidate).items()}
    unrun = unrun_note(unrun_bodies(candidate.model, forward), lows)
    warnings = unused_generation(given.generation, generation) + (() if label else (
        f"{candidate_path}: the candidate computes nothing in 16 bits (every float node is FP32): this check "
        f"compared FP32 with FP32",))
    with oracle_lib.blame(reference, samples):
        table = judge_runtimes(candidate, reference, basis, comparison if given.oracle == "emulate" else None,
                               plan)
    return CheckResult(model_path, candidate_path, comparison, basis, candidate.target.name, label, share,
                       warnings, share_of, judging_target.source, table, found, unrun)


def _judge_generation(reference: ModelContext, candidate: ModelContext, basis: Basis, oracle: OracleName,
                      ) -> tuple[Comparison, GenerationVerdict]:
    """The candidate's generation of each sample on ``oracle``, judged by ``basis`` over the same steps as
    ``convert`` judges its written model (teacher-forced, each sample stopped at its first failing step),
    with its verdict (the bound of its 16-bit nodes, its tokens)."""
    from .basis import Generated
    from .generation.verdict import verdict
    from .generation.written import judge, model_runner

    generated = basis.reference
    if not isinstance(generated, Generated):
        raise InternalError("a generation's check of a basis judged on one forward pass")
    runner = basis.generation_runner(model_runner(candidate, oracle, candidate.custom_op_libraries,
                                                  candidate.target, basis.measured))
    comparison, runs = judge(runner, None, basis.samples.feeds, basis.references, basis.tolerances)
    plan = written_plan(candidate, reference)
    return comparison, verdict(reference, plan, generated.generation, generated.runs, runs, comparison,
                               reference.target.low)

def _reference_failure(failure: ReferenceFailure, reference: ModelContext, candidate: ModelContext,
                       feeds: Sequence[Mapping[str, np.ndarray]]) -> ReferenceFailure:
    """``failure`` (onnx.reference cannot run the candidate) with whether it runs the FP32 model on the first
    sample: where it cannot either, the failure is onnx.reference's alone, not the candidate's."""
    from .oracle.whole_runs import run_reference

    try:
        run_reference(reference, feeds)
    except ReferenceFailure:
        return ReferenceFailure(f"the candidate {candidate.path}, nor the FP32 model {reference.path}",
                                failure.detail, "of the models or of onnx-precision")
    return ReferenceFailure(f"the candidate {candidate.path} (it runs the FP32 model {reference.path})",
                            failure.detail)


def _refuse_fp32_nonfinite(reference: ModelContext, samples: Samples,
                           refs: Sequence[Mapping[str, np.ndarray]]) -> None:
    """Raise FP32NonFinite naming the first node that turns non-finite, as convert refuses."""
    from . import oracle as oracle_lib

    bad = oracle_lib.ranges.first_nonfinite_output(refs)
    if bad is None:
        return
    node = oracle_lib.reference_stats(oracle_lib.Emulator(reference), samples).first_nonfinite
    where = f" on sample {bad[0]}" if len(refs) > 1 else ""
    at = f" (node '{node}' turns non-finite from finite inputs)" if node else ""
    raise FP32NonFinite(f"the FP32 model itself produces NaN/Inf in output '{bad[1]}'{where}{at}; that is "
                        f"not a 16-bit precision problem: fix the model or the data, or pass "
                        f"--allow-fp32-nonfinite to compare only where FP32 is finite")


def _check_outputs_match(
    model: onnx.ModelProto, candidate: onnx.ModelProto, model_path: str, candidate_path: str
) -> None:
    expected = [o.name for o in model.graph.output]
    got = {o.name for o in candidate.graph.output}
    missing = [n for n in expected if n not in got]
    if missing:
        raise ModelLoadError(
            f"{candidate_path}: has no output '{missing[0]}' of {model_path}; "
            f"the candidate must keep the FP32 model's output names"
        )
    inputs = {i.name for i in candidate.graph.input}
    absent = [
        i.name for i in model.graph.input if i.name not in inputs and not _is_initializer(model, i.name)
    ]
    if absent:
        raise ModelLoadError(f"{candidate_path}: has no input '{absent[0]}' of {model_path}")
    # the samples are the FP32 model's feeds: an input they do not hold would reach onnxruntime unfed
    given = {i.name for i in model.graph.input}
    extra = [i.name for i in candidate.graph.input
             if i.name not in given and not _is_initializer(candidate, i.name)]
    if extra:
        raise ModelLoadError(f"{candidate_path}: needs input '{extra[0]}', which {model_path} does not have: "
                             f"the candidate must take the FP32 model's inputs")


def _is_initializer(model: onnx.ModelProto, name: str) -> bool:
    return any(init.name == name for init in model.graph.initializer)


def _oracle_text(oracle: str) -> str:
    if oracle == "emulate":
        return ("emulate (each FP16/BF16 tensor rounded as written, on CPU; onnxruntime CPU alone would hide "
                "FP16 overflow)")
    if oracle == "reference":
        return "reference (onnx.reference: FP16 arithmetic inside every op, a pessimistic bound)"
    return f"{oracle} (the candidate run natively by onnxruntime's {oracle} provider)"
