"""Benchmark: our automatic FP16 conversion against the peers that choose an FP32 set.

For each example model of ``models/`` (and a 12-layer BERT-style encoder with two true culprits)
(and the same encoder four times wider) this prints, per tool: wall time, onnxruntime sessions
built, probes (plans evaluated), FP32 nodes, FP16 share of the original nodes, and whether the
result passes OUR emulated check (``onnx_precision.check``: FP16 rounding emulated on CPU, since
onnxruntime's CPU provider hides FP16 overflow).

Tools:
* ``ours``: ``convert --mode auto`` (one emulation session for the reference, layerwise and every
  probe; one more to verify the written model).
* ``ours, session per probe``: the same probe sequence, but every probe writes the model with the
  rewriter and builds a new session of its emulation, the way ``auto_convert_mixed_precision``
  works. Shows what the one-session design buys (ratio of search-phase time).
* ``occ auto_mixed``: onnxconverter-common's ``auto_convert_mixed_precision`` with its default
  CPU provider and allclose(rtol=1e-2, atol=1e-3); it takes one feed (we give it the last sample,
  the one that overflows where there are several).
* ``modelopt autocast``: NVIDIA ModelOpt AutoCast, only if ``modelopt.onnx.autocast`` imports.

Run: ``python scripts/bench_vs_peers.py [--headroom H] [--models a,b,...]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import models  # noqa: E402
from onnx_precision.check import check  # noqa: E402
from onnx_precision.context import ModelContext, load_model  # noqa: E402
from onnx_precision.convert import choose as auto  # noqa: E402
from onnx_precision.data import SampleSpec  # noqa: E402
from onnx_precision.graph import walk_nodes  # noqa: E402
from onnx_precision.judge import Tolerance  # noqa: E402
from onnx_precision.oracle import run_emulated, run_fp32  # noqa: E402
from onnx_precision.plan import Precision, Reason, uniform_plan  # noqa: E402
from onnx_precision.rewriter import rewrite  # noqa: E402

EXAMPLES = ("l2_normalize", "nafnet_boxfilter", "layernorm_eps", "softmax_nomax", "log_underflow",
            "benign_mlp", "two_culprits", "if_branch", "dynamic_batch", "transformer", "transformer_wide")
TOL = Tolerance()


@dataclass
class Row:
    model: str
    tool: str
    seconds: float
    sessions: int | str
    probes: int | str
    fp32_nodes: int | str
    fp16_share: float | None
    passes: str
    note: str = ""


# Modules that build single-node helper sessions (cached per process): typing_rules learns whether
# onnxruntime loads an op in FP16, fast_cast casts large initializers with one Cast node.
HELPER_SESSIONS = ("helper_sessions.py",)


class SessionCounter:
    """Counts onnxruntime.InferenceSession constructions, whoever builds them; ``probes`` are the
    single-node helper sessions of HELPER_SESSIONS, counted apart."""

    def __init__(self) -> None:
        self.count = 0
        self.probes = 0

    @property
    def text(self) -> str:
        return f"{self.count - self.probes}" + (f" (+{self.probes} helper)" if self.probes else "")

    @contextlib.contextmanager
    def counting(self):
        import traceback

        original = ort.InferenceSession
        counter = self

        class Counted(original):
            def __init__(self, *args, **kwargs):
                counter.count += 1
                if any(f.filename.endswith(HELPER_SESSIONS) for f in traceback.extract_stack()):
                    counter.probes += 1
                super().__init__(*args, **kwargs)

        ort.InferenceSession = Counted
        try:
            yield self
        finally:
            ort.InferenceSession = original


def build(name: str):
    """An example of models/, or ``transformer_wide``: the same 12-layer encoder with d_model 256,
    sequence 128 and MLP 1024, where compute rather than per-node overhead dominates a run."""
    if name == "transformer_wide":
        return models.transformer(d_model=256, seq=128, ff=1024)
    return models.build(name)


def write_example(name: str, directory: str) -> tuple[str, str, tuple[dict, ...]]:
    example = build(name)
    model_path = os.path.join(directory, f"{name}.onnx")
    onnx.save(example.model, model_path)
    data = os.path.join(directory, f"{name}_data")
    os.makedirs(data, exist_ok=True)
    for i, feed in enumerate(example.feeds):
        np.savez(os.path.join(data, f"sample_{i}.npz"), **feed)
    return model_path, data, example.feeds


def node_names(model: onnx.ModelProto) -> list[str]:
    return [r.name for r in walk_nodes(model.graph)]


def fp32_nodes_of(original: onnx.ModelProto, converted: onnx.ModelProto) -> list[str]:
    """Original nodes that still compute in FP32 in ``converted`` (a float output typed float32,
    or a float input read as float32 while the node has no float16 tensor)."""
    inferred = onnx.shape_inference.infer_shapes(converted)
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in (list(inferred.graph.value_info) + list(inferred.graph.input)
                        + list(inferred.graph.output))}
    for init in inferred.graph.initializer:
        types[init.name] = init.data_type
    by_name = {n.name: n for n in inferred.graph.node}
    fp32 = []
    for name in node_names(original):
        node = by_name.get(name)
        if node is None:
            continue
        tensors = [t for t in list(node.output) + list(node.input) if t]
        kinds = {types.get(t) for t in tensors}
        if onnx.TensorProto.FLOAT in kinds and onnx.TensorProto.FLOAT16 not in kinds:
            fp32.append(name)
    return fp32


def float_nodes(model: onnx.ModelProto) -> list[str]:
    """Nodes whose precision matters (a float tensor converts when FP16), subgraphs included:
    the base of every FP16 share in the table."""
    from onnx_precision.typing_rules import model_typing

    return [name for name, t in model_typing(model).items() if t.convertible_inputs or t.convertible_outputs]


def verdict(model_path: str, candidate_path: str, data: str) -> str:
    return "yes" if check(model_path, candidate_path, SampleSpec(inputs=data), TOL).passed else "NO"


def run_ours(name: str, model_path: str, data: str, out_dir: str, headroom: float
             ) -> tuple[Row, auto.AutoResult, float]:
    """``convert`` (auto mode): choose the plan, write it, verify the written file, write reports."""
    from onnx_precision.convert import ConvertOptions, convert

    out_path = os.path.join(out_dir, f"{name}.ours.onnx")
    options = ConvertOptions(mode="auto", samples=SampleSpec(inputs=data), tolerance=TOL, headroom=headroom)
    counter = SessionCounter()
    with counter.counting():
        started = time.perf_counter()
        result = convert(model_path, out_path, options)
        seconds = time.perf_counter() - started
    floats = set(float_nodes(onnx.load(model_path)))
    fp32 = [n for n in result.plan.fp32_nodes if n in floats]
    # --mode auto: a plan chosen (result.auto) and the written file verified (report.verified)
    assert result.auto is not None and result.report is not None and result.report.verified is not None
    search_seconds = sum(p.seconds for p in result.auto.phases if p.name == "search")
    probes = result.auto.search.probes_run if result.auto.search else 1
    note = f"search {search_seconds:.2f}s" + ("" if result.report.verified.passed else " VERIFY FAILED")
    row = Row(name, "ours", seconds, counter.text, probes, len(fp32), 1 - len(fp32) / max(len(floats), 1),
              verdict(model_path, out_path, data), note)
    return row, result.auto, search_seconds


def run_session_per_probe(name: str, model_path: str, data: str, result: auto.AutoResult,
                          search_seconds: float) -> Row:
    """Replay our search's probes, building a new model and session for each (no shared session)."""
    from onnx_precision.data import load_samples
    from onnx_precision.judge import compare_samples

    loaded = load_model(model_path)
    samples = load_samples(loaded.model, SampleSpec(inputs=data))
    base = uniform_plan(node_names(loaded.model), Precision.FP16, Reason("default", "auto"))
    probes = result.search.probes if result.search else ()
    counter = SessionCounter()
    agree = True
    with counter.counting():
        started = time.perf_counter()
        refs = run_fp32(loaded, samples.feeds).outputs
        for probe in probes:
            plan = _probe_plan(base, result, probe.pinned)
            written = rewrite(loaded, plan).model
            cands = run_emulated(ModelContext.of(written, loaded.base_dir), samples.feeds).outputs
            agree &= compare_samples(refs, cands, TOL, "emulate").passed == probe.passed
        seconds = time.perf_counter() - started
    speedup = seconds / search_seconds if search_seconds > 0 else float("nan")
    note = f"same {len(probes)} probes; one-session search is {speedup:.1f}x faster"
    if not agree:
        note += "; VERDICTS DIFFER"
    return Row(name, "ours, session per probe", seconds, counter.text, len(probes), "=", None, "=", note)


def _probe_plan(base, result: auto.AutoResult, pinned: frozenset):
    """The plan a search probe evaluated: the search's base (user, type and headroom pins) plus
    ``pinned``."""
    searched = set(auto.pinned_by(result.plan, "search"))
    plan = base.with_fp32(n for n in result.plan.fp32_nodes if n not in searched)
    return plan.with_fp32(pinned)


def run_occ(name: str, model_path: str, data: str, feeds: tuple[dict, ...], out_dir: str) -> Row:
    from onnxconverter_common.auto_mixed_precision import auto_convert_mixed_precision

    model = onnx.load(model_path)
    floats = set(float_nodes(model))
    counter = SessionCounter()
    note = ""
    with counter.counting():
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()) as log:
                converted = auto_convert_mixed_precision(model, dict(feeds[-1]), rtol=TOL.rtol, atol=TOL.atol,
                                                         keep_io_types=True)
        except Exception as e:  # report the peer's failure as it is
            return Row(name, "occ auto_mixed", time.perf_counter() - started, counter.text, "?", "-", None,
                       "-", f"failed: {str(e).splitlines()[0][:60]}")
        seconds = time.perf_counter() - started
    attempts = log.getvalue().count("Running attempt") + 1  # + the final validation run
    out_path = os.path.join(out_dir, f"{name}.occ.onnx")
    onnx.save(converted, out_path)
    fp32 = [n for n in fp32_nodes_of(model, converted) if n in floats]
    return Row(name, "occ auto_mixed", seconds, counter.text, attempts, len(fp32),
               1 - len(fp32) / max(len(floats), 1), verdict(model_path, out_path, data), note)


def run_modelopt(name: str) -> Row | None:
    try:
        import modelopt.onnx.autocast  # noqa: F401
    except ImportError:
        return None
    return Row(name, "modelopt autocast", 0.0, "-", "-", "-", None, "-", "importable; not wired yet")


def probe_cost(model_path: str, feeds, plan) -> tuple[float, float, float]:
    """(one probe, one plain FP32 run with onnxruntime's default optimizations, one without) in
    seconds over all samples, each the best of 7 runs, interleaved so machine load hits all alike.
    A probe is what the search pays per plan: a run of the emulation session (built as the search
    builds it) and the comparison with the FP32 outputs."""
    from onnx_precision.judge import compare_outputs
    from onnx_precision.oracle import EmulationSession, session_options

    loaded = load_model(model_path)
    emulation = EmulationSession(loaded)
    refs = [emulation.run(None, feed) for feed in feeds]
    optimized = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    plain = ort.InferenceSession(model_path, session_options(), providers=["CPUExecutionProvider"])

    def probe() -> None:
        for feed, ref in zip(feeds, refs):
            compare_outputs(ref, emulation.run(plan, feed), TOL, "emulate")

    def run(session) -> None:
        for feed in feeds:
            session.run(None, feed)

    best = [float("inf")] * 3
    for _ in range(7):
        for i, step in enumerate((probe, lambda: run(optimized), lambda: run(plain))):
            started = time.perf_counter()
            step()
            best[i] = min(best[i], time.perf_counter() - started)
    return best[0], best[1], best[2]


def fmt(row: Row) -> str:
    share = "" if row.fp16_share is None else f"{100 * row.fp16_share:.1f}%"
    return (f"| {row.model} | {row.tool} | {row.seconds:.2f} | {row.sessions} | {row.probes} "
            f"| {row.fp32_nodes} | {share} | {row.passes} | {row.note} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default=f"{auto.DEFAULT_HEADROOM:g},0",
                        help="comma-separated headroom values for our tool (0: off, so the search does all "
                             "the work)")
    parser.add_argument("--models", default=",".join(EXAMPLES))
    args = parser.parse_args()
    headrooms = [float(h) for h in args.headroom.split(",")]
    print(f"tolerance atol {TOL.atol:g}, rtol {TOL.rtol:g}, cosine {TOL.min_cosine:g}")
    print("| model | tool | seconds | sessions | probes | FP32 nodes | FP16 share | passes our check "
          "| note |")
    print("|---|---|---|---|---|---|---|---|---|")
    probe_costs = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model_path, data, feeds = write_example(name, tmp)
            for headroom in headrooms:
                row, result, search_seconds = run_ours(name, model_path, data, tmp, headroom)
                row.tool = f"ours (headroom {headroom:g})"
                print(fmt(row), flush=True)
                if result.search is not None and result.search.probes_run > 1:
                    print(fmt(run_session_per_probe(name, model_path, data, result, search_seconds)),
                          flush=True)
            probe, optimized, plain = probe_cost(model_path, feeds, result.plan)
            probe_costs.append((name, probe * 1e3, probe / optimized, probe / plain))
            print(fmt(run_occ(name, model_path, data, feeds, tmp)), flush=True)
            modelopt_row = run_modelopt(name)
            if modelopt_row is not None:
                print(fmt(modelopt_row), flush=True)
    if probe_costs:
        print()
        print("one probe (emulation session run + comparison, all samples) against one plain FP32 run:")
        print("| model | probe ms | x plain run (ORT default optimizations) "
              "| x plain run (no graph optimizations) |")
        print("|---|---|---|---|")
        for name, ms, optimized, plain in probe_costs:
            print(f"| {name} | {ms:.2f} | {optimized:.2f} | {plain:.2f} |")
    try:
        import modelopt.onnx.autocast  # noqa: F401
    except ImportError:
        print("ModelOpt AutoCast: not installed (modelopt.onnx.autocast does not import); not compared")


if __name__ == "__main__":
    main()
