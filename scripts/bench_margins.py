"""Issue 23 §3: the underflow headroom measured, on the examples and real models.

    python scripts/bench_margins.py [--models NAME ...] [--headroom H] [--quiet F] [--no-real]
                                    [--real-dir DIR]

For each model (every example in ``models/`` with its data, and the trained networks of
``bench_precisions.REAL`` from their wheels), on its samples:

* the plan the search starts from: all FP16 resolved, with the overflow headroom's pins (``--headroom``,
  default 2);
* ``under``: the nodes :func:`onnx_precision.policy.underflow_headroom` finds in it (16-bit nodes whose
  largest |x| lies within H of FP16's normal minimum), and ``least``: the least margin in binades over
  every FP16 node but Constants (its largest |x| against 6.1e-5);
* ``FP16%``: that plan's FP16 share of estimated FLOPs, and ``+pin``: the share were the flagged nodes
  pinned FP32 too (what pinning them by default would cost);
* ``quiet``: the relative RMS error of the worst output of that plan, and of it with the flags pinned,
  on the samples with every float input scaled by ``--quiet`` (default 0.1: 10% volume), against FP32
  on the same quiet inputs; ``loud``: the same on the samples as they are.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_precisions import REAL, Case, real_cases  # noqa: E402

import models  # noqa: E402
from models.generate import data_path, model_path  # noqa: E402
from onnx_precision import policy  # noqa: E402
from onnx_precision.context import load_model  # noqa: E402
from onnx_precision.data import SampleSpec, load_samples  # noqa: E402
from onnx_precision.float_types import FP16  # noqa: E402
from onnx_precision.flops import estimate_flops  # noqa: E402
from onnx_precision.judge import Tolerance, compare_samples  # noqa: E402
from onnx_precision.oracle import Emulator  # noqa: E402
from onnx_precision.oracle.inspection import NodeStats  # noqa: E402
from onnx_precision.plan import Precision, PrecisionPlan, Reason, uniform_plan  # noqa: E402


def spec_of(args: tuple[str, ...]) -> SampleSpec:
    """The SampleSpec of a case's data arguments (``--inputs P`` or ``--input-shape``/``--input-range``)."""
    pairs = dict(zip(args[::2], args[1::2]))
    if "--inputs" in pairs:
        return SampleSpec(inputs=pairs["--inputs"])
    name, shape = pairs["--input-shape"].split(":")
    lo, hi = pairs["--input-range"].split(":")[1].split(",")
    return SampleSpec(input_shapes={name: tuple(int(d) for d in shape.split("x"))},
                      input_ranges={name: (float(lo), float(hi))})


def share(plan: PrecisionPlan, flops: dict[str, float]) -> float:
    total = sum(flops.get(n, 0.0) for n in plan.decisions)
    return sum(flops.get(n, 0.0) for n in plan.low_nodes) / total if total else 0.0


def worst_rel_rms(emulator: Emulator, plan: PrecisionPlan, feeds, refs) -> float:
    cands = [emulator.run(plan, feed) for feed in feeds]
    comparison = compare_samples(refs, [{k: c[k] for k in r} for c, r in zip(cands, refs)], Tolerance(),
                                 "emulate")
    return max(m.rel_rms_err for m in comparison.outputs)


def measure(case: Case, headroom: float, quiet: float) -> str:
    ctx = load_model(case.model)
    samples = load_samples(ctx.model, spec_of(case.data_args))
    emulator = Emulator(ctx)
    stats = emulator.inspection.reference(samples).stats
    plan = policy.resolve(ctx, uniform_plan(ctx.node_ops, Precision.FP16, Reason("default", "bench")))
    over = policy.headroom_pins(ctx, plan, stats, headroom)
    start = plan.with_fp32_reasons({n: (r,) for n, r in over.items()})
    node_stats = {ref.name: NodeStats(max(stats[t].max_abs for t in ref.node.output if t in stats))
                  for ref in ctx.nodes if any(t in stats for t in ref.node.output)}
    under = policy.underflow_headroom(ctx, start, node_stats, headroom)
    pinned = policy.resolve(ctx, start.with_fp32(under, Reason("user", "bench: the underflow headroom")))
    least = min((FP16.scale_binades(s.max_abs) for n, s in node_stats.items()
                 if start.is_low(n) and ctx.node_ops[n] != "Constant" and s.max_abs is not None),
                default=math.inf)
    flops = estimate_flops(ctx.model, {k: np.shape(v) for k, v in samples.feeds[0].items()})
    quiet_feeds = [{k: (v * np.asarray(quiet, v.dtype) if np.issubdtype(v.dtype, np.floating) else v)
                    for k, v in feed.items()} for feed in samples.feeds]
    errors = []
    for feeds in (samples.feeds, quiet_feeds):
        refs = [emulator.run(None, feed) for feed in feeds]
        errors += [worst_rel_rms(emulator, start, feeds, refs),
                   worst_rel_rms(emulator, pinned, feeds, refs) if under else math.nan]
    names = ", ".join(f"{n} ({b:.2f})" for n, b in sorted(under.items(), key=lambda item: item[1])[:3])
    more = f" +{len(under) - 3}" if len(under) > 3 else ""
    cells = [f"{case.name:<18}", f"{len(under):>5}", f"{least:>6.1f}", f"{100 * share(start, flops):>5.1f}",
             f"{100 * share(pinned, flops):>5.1f}", *(f"{e:>8.3g}" for e in errors), f"{names}{more}"]
    return "| " + " | ".join(cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", metavar="NAME")
    parser.add_argument("--headroom", type=float, default=2.0)
    parser.add_argument("--quiet", type=float, default=0.1, help="the factor quiet inputs are scaled by")
    parser.add_argument("--no-real", action="store_true")
    parser.add_argument("--real-dir", default="/tmp/onnx-precision-real")
    args = parser.parse_args(argv)
    wanted = set(args.models) if args.models else None
    cases = [Case(name, model_path(name), ("--inputs", data_path(name)))
             for name in models.BUILDERS if wanted is None or name in wanted]
    if not args.no_real:
        workdir = tempfile.mkdtemp(prefix="bench-margins-")
        known = {r.name for r in REAL}
        real, missing = real_cases(args.real_dir, workdir, wanted & known if wanted else None)
        cases += real
        for text in missing:
            print(f"skipped {text}")
    print(f"headroom {args.headroom:g} ({math.log2(args.headroom):g} binade(s) over FP16's normal minimum "
          f"{FP16.min_normal:.3g}); quiet inputs x{args.quiet:g}")
    print("| model              | under | least  | FP16% | +pin  | loud     | loud+pin | quiet    | quiet+pin"
          " | flagged (binades)")
    for case in cases:
        try:
            print(measure(case, args.headroom, args.quiet), flush=True)
        except Exception as e:  # one model's failure is a row, not the end of the table
            first = (str(e).splitlines() or [""])[0][:100]
            print(f"| {case.name:<18} | error: {type(e).__name__}: {first}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
