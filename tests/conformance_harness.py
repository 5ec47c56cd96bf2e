"""Conformance harness over the ONNX backend node suite: select, convert to FP16, check, run, compare.

Shared by tests/test_conformance.py (one test per case) and scripts/conformance.py (counts for
our converter and onnxconverter-common's on the same selection).

Selection: deterministic cases with float32 tensors that onnxruntime (CPU) runs and matches the
suite's expected outputs in FP32. A selected case passes when the all-fp16 conversion passes the
full checker, loads and runs in onnxruntime, and its outputs match the FP32 run: float outputs
within an FP16 tolerance, other outputs exactly.
"""

from __future__ import annotations

import collections
import functools
import glob
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort

from onnx_precision import graph, rewriter, typing_rules
from onnx_precision.context import ModelContext
from onnx_precision.plan import Precision, PrecisionPlan, Reason, uniform_plan

RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
              "Multinomial"}
MAX_IR = 10  # onnxruntime rejects IR versions newer than it knows
RTOL = 1e-2  # per element, relative to the FP32 value
ATOL_SCALE = 5e-3  # absolute, relative to the output's largest |FP32 value| (cancellation)
ATOL_FLOOR = 1e-4  # FP16 subnormals are spaced 6e-8 apart but keep ~1e-4 of absolute precision


@dataclass(frozen=True)
class Case:
    name: str
    model: onnx.ModelProto
    feeds: dict
    expected: tuple
    rtol: float
    atol: float


@functools.lru_cache(maxsize=1)
def node_cases() -> dict[str, Case]:
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = collect_testcases()
    out = {}
    for c in raw:
        if c.model is None or not c.data_sets:
            continue
        inputs, outputs = c.data_sets[0]
        model = onnx.ModelProto()
        model.CopyFrom(c.model)
        model.ir_version = min(model.ir_version, MAX_IR)
        graph.name_nodes(model)
        init_names = {t.name for t in model.graph.initializer}
        names = [v.name for v in model.graph.input if v.name not in init_names]
        # onnxruntime takes arrays, not numpy scalars (the suite gives 0-d inputs as scalars)
        feeds = {n: np.asarray(v) if isinstance(v, np.generic) else v for n, v in zip(names, inputs)}
        out[c.name] = Case(c.name, model, feeds, tuple(outputs), c.rtol, c.atol)
    return out


def _has_float(model: onnx.ModelProto) -> bool:
    types = typing_rules.tensor_types(model)
    return any(typing_rules.elem_type(t) == onnx.TensorProto.FLOAT for t in types.values())


def _ops(model: onnx.ModelProto) -> set:
    return {r.node.op_type for r in graph.walk_nodes(model.graph)}


def run_model(model: onnx.ModelProto, feeds: dict) -> list:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _flatten(value) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten(v)]
    return [np.asarray(value)]


def _matches_expected(got: Sequence, expected: Sequence, rtol: float, atol: float) -> bool:
    for g, e in zip(got, expected):
        gs, es = _flatten(g), _flatten(e)
        if len(gs) != len(es):
            return False
        for a, b in zip(gs, es):
            if a.shape != b.shape:
                return False
            if a.dtype.kind in "fc":
                if not np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True):
                    return False
            elif a.dtype.kind in "OSU":
                if not np.array_equal(a.astype(str), b.astype(str)):
                    return False
            elif not np.array_equal(a, b):
                return False
    return True


@functools.cache
def selection(name: str) -> str | None:
    """None when ``name`` is in the selection, else why not."""
    case = node_cases()[name]
    if _ops(case.model) & RANDOM_OPS:
        return "not deterministic"
    if not _has_float(case.model):
        return "no float32 tensor"
    try:
        got = run_model(case.model, case.feeds)
    except Exception as e:
        return f"onnxruntime cannot run it in FP32: {str(e).splitlines()[0][:120]}"
    if not _matches_expected(got, case.expected, case.rtol, case.atol):
        return "onnxruntime FP32 output differs from the expected output"
    _FP32_OUTPUTS[name] = got
    return None


_FP32_OUTPUTS: dict[str, list] = {}  # onnxruntime's FP32 outputs of selected cases (one session each)


def left_out(names: Iterable[str]) -> collections.Counter[str]:
    """How many of ``names`` are outside the selection, by reason (its first clause)."""
    return collections.Counter(why.split(":")[0] for why in map(selection, names) if why is not None)


def selection_summary() -> str:
    """One line: the node cases, how many are selected, and why the others are left out."""
    cases = node_cases()
    reasons = ", ".join(f"{n} {why}" for why, n in left_out(cases).most_common())
    selected = sum(selection(n) is None for n in cases)
    return f"ONNX node cases: {len(cases)}, {selected} selected; left out as they cannot apply: {reasons}"


def fp16_close(ref: np.ndarray, got: np.ndarray) -> str | None:
    """None when ``got`` (from the FP16 model) matches the FP32 ``ref`` within FP16 tolerance."""
    if ref.shape != got.shape:
        return f"shape {got.shape} != {ref.shape}"
    if ref.dtype.kind not in "fc":
        if ref.dtype.kind in "OSU":
            same = np.array_equal(ref.astype(str), got.astype(str))
        else:
            same = ref.dtype == got.dtype and np.array_equal(ref, got)
        return None if same else f"non-float output differs ({got.dtype} vs {ref.dtype})"
    r = ref.astype(np.float64)
    g = got.astype(np.float64)
    if not np.array_equal(np.isnan(r), np.isnan(g)):
        return "NaN positions differ"
    finite = np.isfinite(r)
    if not np.array_equal(r[~finite & ~np.isnan(r)], g[~finite & ~np.isnan(r)]):
        return "Inf positions differ"
    if not finite.any():
        return None
    scale = float(np.abs(r[finite]).max())
    err = np.abs(g[finite] - r[finite])
    allowed = RTOL * np.abs(r[finite]) + ATOL_SCALE * scale + ATOL_FLOOR
    bad = ~(err <= allowed)
    if bad.any():
        return f"max error {float(err.max()):.3g} at scale {scale:.3g} ({int(bad.sum())} elements off)"
    return None


def passes_checker(model: onnx.ModelProto) -> bool:
    """Whether the FP32 model passes the full checker (a few suite models do not, e.g. test_mvn,
    whose function body onnx's own checker rejects): only then is it required of the FP16 one."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return False
    return True


def all_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """Our conversion: every node FP16 where possible, graph I/O kept FP32."""
    names = [r.name for r in graph.walk_nodes(model.graph)]
    plan = uniform_plan(names, Precision.FP16, Reason("default", "all-fp16"))
    return rewriter.rewrite(ModelContext.of(model), plan).model


def mixed_plan(model: onnx.ModelProto, seed: int) -> PrecisionPlan:
    """About half the nodes pinned FP32 (a seeded choice, the same for the same graph)."""
    names = [r.name for r in graph.walk_nodes(model.graph)]
    rng = np.random.default_rng([seed] + [ord(c) for c in model.graph.name])
    pinned = [n for n, pick in zip(names, rng.random(len(names)) < 0.5) if pick]
    plan = uniform_plan(names, Precision.FP16, Reason("default", "all-fp16"))
    return plan.with_fp32(pinned, Reason("user", "random"))


def mixed_plan_converter(seed: int) -> Callable[[onnx.ModelProto], onnx.ModelProto]:
    """A conversion with :func:`mixed_plan`."""
    def convert(model: onnx.ModelProto) -> onnx.ModelProto:
        return rewriter.rewrite(ModelContext.of(model), mixed_plan(model, seed)).model
    return convert


def has_control_flow_or_sequences(model: onnx.ModelProto) -> bool:
    types = typing_rules.tensor_types(model)
    return bool(_ops(model) & {"If", "Loop", "Scan"}) or any(not typing_rules.is_tensor(t)
                                                             for t in types.values())


def onnxconverter_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The baseline: onnxconverter-common's converter, graph I/O kept FP32."""
    from onnxconverter_common import float16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float16.convert_float_to_float16(model, keep_io_types=True)


def check_conversion(case: Case, convert: Callable[[onnx.ModelProto], onnx.ModelProto]) -> str | None:
    """None when the converted case is valid, runs and matches FP32; else the first failure."""
    reference = _FP32_OUTPUTS.get(case.name) or run_model(case.model, case.feeds)
    try:
        source = onnx.ModelProto()
        source.CopyFrom(case.model)  # onnxconverter-common edits its input in place
        converted = convert(source)
    except Exception as e:
        return f"conversion raised {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    if passes_checker(case.model):
        try:
            onnx.checker.check_model(converted, full_check=True)
        except Exception as e:
            return f"checker: {str(e).splitlines()[0][:200]}"
    try:
        got = run_model(converted, case.feeds)
    except Exception as e:
        return f"onnxruntime: {str(e).splitlines()[0][:200]}"
    for i, (r, g) in enumerate(zip(reference, got)):
        rs, gs = _flatten(r), _flatten(g)
        if len(rs) != len(gs):
            return f"output {i}: {len(gs)} tensors, expected {len(rs)}"
        for a, b in zip(rs, gs):
            problem = fp16_close(a, b)
            if problem:
                return f"output {i}: {problem}"
    return None


def light_models() -> list[str]:
    directory = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return sorted(glob.glob(os.path.join(directory, "light_*.onnx")))


def light_case(path: str) -> Case:
    model = onnx.load(path)
    model.ir_version = min(model.ir_version, MAX_IR)
    graph.name_nodes(model)
    rng = np.random.default_rng(0)
    init_names = {t.name for t in model.graph.initializer}
    feeds = {}
    for v in model.graph.input:
        if v.name in init_names:
            continue
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in v.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
        feeds[v.name] = rng.random(shape, dtype=np.float64).astype(dtype)
    return Case(os.path.basename(path), model, feeds, (), 0.0, 0.0)
