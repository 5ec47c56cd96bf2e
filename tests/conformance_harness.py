"""Conformance harness over the ONNX backend node suite: select, convert to FP16, check, run, compare.

Shared by tests/test_conformance.py (one test per case) and scripts/conformance.py (counts for
our converter and onnxconverter-common's on the same selection).

Selection: deterministic cases with float32 tensors that onnxruntime (CPU) runs and matches the
suite's expected outputs in FP32. A selected case passes when the all-fp16 conversion passes the
full checker, loads and runs in onnxruntime, and its outputs match the FP32 run: float outputs
within an FP16 tolerance, other outputs exactly.

The cases, the selection and the FP32 outputs (:func:`suite`) are made once per machine and versions
and kept under .pytest_cache/: making them takes 12-15 s of CPU, and every pytest-xdist worker
collects tests/test_conformance.py. In a fresh checkout (CI) the workers collecting it at once make
it together, each a share, rather than one making it while the others wait.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import glob
import hashlib
import importlib
import importlib.util
import os
import pickle
import pkgutil
import platform
import shutil
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort

try:
    import fcntl
except ImportError:  # Windows: each process makes the suite itself
    fcntl = None  # type: ignore[assignment]

from onnx_precision import graph, rewriter, typing_rules
from onnx_precision.context import ModelContext
from onnx_precision.plan import Precision, PrecisionPlan, Reason, uniform_plan

RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
              "Multinomial"}
MAX_IR = 10  # onnxruntime rejects IR versions newer than it knows
CACHE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".pytest_cache",
                         "conformance")  # ignored by git, as pytest's own cache beside it
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


@dataclass(frozen=True)
class Suite:
    """The node cases, why each is left out of the selection (None: selected), and onnxruntime's FP32
    outputs of the selected ones (one session each)."""
    cases: dict[str, Case]
    reasons: dict[str, str | None]
    fp32_outputs: dict[str, list]


def _cache_key() -> str:
    """What the suite depends on: this file, the versions that make and run the cases, the machine
    (onnxruntime's FP32 outputs may differ by CPU)."""
    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu = next((line for line in f if line.startswith("model name")), "")
    with open(__file__, "rb") as f:
        source = f.read()
    facts = [onnx.__version__, ort.__version__, np.__version__, sys.version, platform.machine(), cpu]
    return hashlib.sha256(source + repr(facts).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def suite() -> Suite:
    """The suite, read from CACHE_DIR when this machine made it with this file and these versions, else
    made there (onnx's generators 9 s of CPU, three pooling modules 7 s of them; onnxruntime's FP32
    runs 3.5-6 s). It is kept in parts, one per generator module of onnx's node cases (each makes its
    cases as it is imported): a process takes each part that no other is making, under that part's
    lock, then waits for the parts others are making, and makes one itself if its maker died. So the
    workers of a cold `pytest -n 2` make half each. Where CACHE_DIR cannot be written (or locked),
    the suite is made in memory."""
    modules = _generator_modules()
    directory = os.path.join(CACHE_DIR, _cache_key())
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return _make_suite(modules)
    if fcntl is None:
        return _make_suite(modules)
    parts = {m: _part(directory, m, wait=False) for m in modules}
    made = _combine([parts[m] or _part(directory, m, wait=True) for m in modules])
    for entry in os.listdir(CACHE_DIR):  # what other versions (or an older harness) left
        old = os.path.join(CACHE_DIR, entry)
        if old == directory:
            continue
        if os.path.isdir(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(old)
    return made


def _part(directory: str, module: str, wait: bool) -> Suite | None:
    """The cases ``module`` makes and their selection: read from ``directory``, else made and written
    there, under the part's lock; None when another process holds it and ``wait`` is false."""
    assert fcntl is not None
    path = os.path.join(directory, f"{module}.pickle")
    with open(f"{path}.lock", "w") as lock:  # released when the file closes (or its process ends)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None
        if os.path.exists(path):
            with open(path, "rb") as f:
                part: Suite = pickle.load(f)
            return part
        made = _make_suite([module])
        with open(f"{path}.tmp", "wb") as f:
            pickle.dump(made, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(f"{path}.tmp", path)
        return made


def _combine(parts: Iterable[Suite | None]) -> Suite:
    cases: dict[str, Case] = {}
    reasons: dict[str, str | None] = {}
    fp32_outputs: dict[str, list] = {}
    for part in parts:
        assert part is not None  # a part waited for is there
        for name, case in part.cases.items():
            if name not in cases:
                cases[name], reasons[name] = case, part.reasons[name]
                if name in part.fp32_outputs:
                    fp32_outputs[name] = part.fp32_outputs[name]
    return Suite(cases, reasons, fp32_outputs)


def _make_suite(modules: Sequence[str]) -> Suite:
    cases = _generated_cases(modules)
    fp32_outputs: dict[str, list] = {}
    reasons = {name: _selection(case, fp32_outputs) for name, case in cases.items()}
    return Suite(cases, reasons, fp32_outputs)


def node_cases() -> dict[str, Case]:
    return suite().cases


def _generator_modules() -> list[str]:
    """The modules onnx's collect_testcases imports, in its order (none imported here)."""
    from onnx import ONNX_ML
    from onnx.backend.test.case import node

    found: list[str] = []

    def walk(package: str, path: Iterable[str]) -> None:
        for _, name, is_package in pkgutil.iter_modules(list(path)):
            module = f"{package}.{name}"
            if not ONNX_ML and module.startswith(f"{node.__name__}.ai_onnx_ml"):
                continue
            found.append(module)
            spec = importlib.util.find_spec(module) if is_package else None
            if spec is not None and spec.submodule_search_locations is not None:
                walk(module, spec.submodule_search_locations)

    walk(node.__name__, node.__path__)
    return found


def _generated_cases(modules: Sequence[str]) -> dict[str, Case]:
    """The cases ``modules`` make as they are imported (collect_testcases imports them all): onnx
    appends each to its list of node cases, reseeding numpy before each case's generator."""
    from onnx.backend.test.case import node
    raw = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in modules:
            made = len(node._NodeTestCases)
            importlib.import_module(module)
            raw += node._NodeTestCases[made:]
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
    # One thread: pytest-xdist already runs a test per core, and a second thread spinning for work
    # costs CPU (VGG-19 in FP16: 1.9 s of CPU with one, 2.4 s with two).
    options.intra_op_num_threads = 1
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


def selection(name: str) -> str | None:
    """None when ``name`` is in the selection, else why not."""
    return suite().reasons[name]


def _selection(case: Case, fp32_outputs: dict[str, list]) -> str | None:
    """None when ``case`` is in the selection (its outputs then in ``fp32_outputs``), else why not."""
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
    fp32_outputs[case.name] = got
    return None


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
    reference = suite().fp32_outputs.get(case.name) or run_model(case.model, case.feeds)
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
