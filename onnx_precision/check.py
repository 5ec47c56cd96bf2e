"""``check``: does a candidate FP16 / mixed-precision model stay within tolerance of its FP32 model?

A pre-deployment gate for any candidate, also one made by another tool. The default oracle
*emulates* FP16 on CPU (:func:`onnx_precision.oracle.emulate_model`: the candidate's FP16 tensors
rounded through float16 inside an FP32 graph), because onnxruntime's CPU provider would run the
FP16 model in FP32 and hide every overflow. ``cuda`` / ``tensorrt`` run the candidate natively on
that provider instead (onnxruntime-gpu needed). The result always says which oracle produced it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import onnx

from . import model_io
from .compare import Comparison, Tolerance, compare_samples
from .data import SampleSpec, Samples, load_samples
from .errors import ModelLoadError, PrecisionError

ORACLES = ("emulate", "cuda", "tensorrt")
NATIVE_PROVIDERS = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


class OracleUnavailable(PrecisionError):
    """The requested native oracle's provider is not installed."""


class FP32NonFinite(PrecisionError):
    """The FP32 model's outputs are NaN/Inf on the samples: FP16 is not to blame (exit 1, as convert)."""

    exit_code = 1


@dataclass(frozen=True)
class CheckResult:
    model: str
    candidate: str
    comparison: Comparison
    samples: Samples

    @property
    def passed(self) -> bool:
        return self.comparison.passed

    @property
    def oracle(self) -> str:
        return self.comparison.oracle

    def lines(self) -> list[str]:
        """Per-output metrics and the verdict, for the terminal."""
        out = [f"check {self.candidate} against {self.model}",
               f"oracle: {_oracle_text(self.oracle)}",
               f"samples: {len(self.samples.feeds)} ({self.samples.source})"]
        out += [f"warning: {w}" for w in self.samples.warnings]
        out += [f"  {m.name}: {m.summary()}  {'pass' if m.passed else 'FAIL'}" for m in self.comparison.outputs]
        out.append("PASS: within tolerance" if self.passed else "FAIL: out of tolerance or non-finite")
        return out


def check(model_path: str, candidate_path: str, spec: SampleSpec | None = None,
          tol: Tolerance | None = None, oracle: str = "emulate") -> CheckResult:
    """Compare ``candidate_path`` with the FP32 ``model_path`` on the samples of ``spec``."""
    from . import oracle as oracle_lib  # heavy: onnxruntime

    spec = spec or SampleSpec()
    tol = tol or Tolerance()
    require_oracle(oracle)
    reference = model_io.load_model(model_path)
    candidate = model_io.load_model(candidate_path)
    _check_outputs_match(reference.model, candidate.model, model_path, candidate_path)
    samples = load_samples(reference.model, spec)

    refs = oracle_lib.run_fp32(reference.model, samples.feeds, reference.base_dir).outputs
    if not tol.allow_fp32_nonfinite:
        _refuse_fp32_nonfinite(reference, samples, refs)
    try:
        cands = run_candidate(candidate, samples.feeds, oracle)
    except PrecisionError:
        raise
    except Exception as e:  # onnxruntime rejects the candidate (shapes, types, ops): the user's input
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"{candidate_path}: onnxruntime cannot run the candidate on the samples: "
                             f"{first}")
    comparison = compare_samples(refs, _only(cands, refs), tol, cands.oracle)
    return CheckResult(model_path, candidate_path, comparison, samples)


def run_candidate(candidate: model_io.LoadedModel, feeds, oracle: str = "emulate"):
    """The candidate's outputs on ``feeds`` under ``oracle`` (an OracleRun); one session."""
    from . import oracle as oracle_lib

    if oracle == "emulate":
        return oracle_lib.run_emulated(candidate.model, feeds, candidate.base_dir)
    require_oracle(oracle)
    return oracle_lib.run_native(candidate.model, feeds, NATIVE_PROVIDERS[oracle], candidate.base_dir)


def verify_written(model: onnx.ModelProto, base_dir: str, feeds, reference_outputs, tol: Tolerance,
                   oracle: str = "emulate") -> Comparison:
    """Run what was WRITTEN (emulated, or natively on a GPU provider) against the FP32 outputs the
    search already computed: one session, whatever happened before."""
    run = run_candidate(model_io.LoadedModel(model, "", base_dir, []), feeds, oracle)
    return compare_samples(list(reference_outputs), _only(run, reference_outputs), tol, run.oracle)


def require_oracle(oracle: str) -> None:
    """Fail before any work when ``oracle`` names a provider this onnxruntime does not have."""
    if oracle not in ORACLES:
        raise OracleUnavailable(f"unknown oracle '{oracle}'; expected one of {', '.join(ORACLES)}")
    if oracle in NATIVE_PROVIDERS:
        import onnxruntime as ort
        if NATIVE_PROVIDERS[oracle] not in ort.get_available_providers():
            raise OracleUnavailable(f"--oracle {oracle}: onnxruntime has no {NATIVE_PROVIDERS[oracle]} here "
                                    f"(install onnxruntime-gpu on a machine with the GPU stack)")


def verify_output(output_path: str, auto_result, tol: Tolerance, oracle: str = "emulate"):
    """Verify the file ``convert`` wrote, read back from disk: emulated (always) and natively on
    ``oracle``'s provider when one is named. Returns (emulated, native or None, phase costs)."""
    from .report import PhaseCost

    started = time.perf_counter()
    written = model_io.load_model(output_path)
    feeds, refs = auto_result.samples.feeds, auto_result.reference_outputs
    verified = verify_written(written.model, written.base_dir, feeds, refs, tol)
    phases = [PhaseCost("verify", time.perf_counter() - started, sessions=1, probes=1)]
    native = None
    if oracle != "emulate":
        started = time.perf_counter()
        native = verify_written(written.model, written.base_dir, feeds, refs, tol, oracle)
        phases.append(PhaseCost(f"native {oracle}", time.perf_counter() - started, sessions=1, probes=1))
    return verified, native, tuple(phases)


def _refuse_fp32_nonfinite(reference: model_io.LoadedModel, samples: Samples, refs) -> None:
    """Raise FP32NonFinite naming the first node that turns non-finite, as convert refuses."""
    from . import oracle as oracle_lib

    bad = next(((i, name) for i, out in enumerate(refs) for name, value in out.items()
                if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all()), None)
    if bad is None:
        return
    node = oracle_lib.reference_stats(oracle_lib.EmulationSession(reference.model, reference.base_dir),
                                      samples).first_nonfinite
    where = f" on sample {bad[0]}" if len(refs) > 1 else ""
    at = f" (node '{node}' turns non-finite from finite inputs)" if node else ""
    raise FP32NonFinite(f"the FP32 model itself produces NaN/Inf in output '{bad[1]}'{where}{at}; that is not an "
                        f"FP16 problem: fix the model or the data, or pass --allow-fp32-nonfinite to compare only "
                        f"where FP32 is finite")


def _only(run, refs) -> list[dict[str, np.ndarray]]:
    """Each candidate sample restricted to the reference's outputs."""
    return [{name: np.asarray(out[name]) for name in ref if name in out}
            for out, ref in zip(run.outputs, refs)]


def _check_outputs_match(model: onnx.ModelProto, candidate: onnx.ModelProto, model_path: str,
                         candidate_path: str) -> None:
    expected = [o.name for o in model.graph.output]
    got = {o.name for o in candidate.graph.output}
    missing = [n for n in expected if n not in got]
    if missing:
        raise ModelLoadError(f"{candidate_path}: has no output '{missing[0]}' of {model_path}; "
                             f"the candidate must keep the FP32 model's output names")
    inputs = {i.name for i in candidate.graph.input}
    absent = [i.name for i in model.graph.input
              if i.name not in inputs and not _is_initializer(model, i.name)]
    if absent:
        raise ModelLoadError(f"{candidate_path}: has no input '{absent[0]}' of {model_path}")


def _is_initializer(model: onnx.ModelProto, name: str) -> bool:
    return any(init.name == name for init in model.graph.initializer)


def _oracle_text(oracle: str) -> str:
    if oracle == "emulate":
        return "emulate (FP16 rounding emulated on CPU; onnxruntime CPU alone would hide FP16 overflow)"
    return f"{oracle} (the candidate run natively by onnxruntime's {oracle} provider)"
