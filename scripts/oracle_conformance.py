"""The emulation oracle on every ONNX backend node case onnxruntime runs in FP32.

    python scripts/oracle_conformance.py

For each case of tests/conformance_harness.py's selection: one EmulationSession; all switches off
must be bit-identical to the FP32 model (run_fp32), and the all-FP16 plan bit-identical to
emulating the model the rewriter writes for it (run_emulated). Prints the count and every
failure with its reason. Takes a few minutes (collecting the cases alone takes ~20 s).
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import conformance_harness as harness  # noqa: E402

from onnx_precision.context import ModelContext  # noqa: E402
from onnx_precision.graph import walk_nodes  # noqa: E402
from onnx_precision.oracle import EmulationSession, run_emulated, run_fp32  # noqa: E402
from onnx_precision.plan import Precision, Reason, uniform_plan  # noqa: E402


def same(a, b) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.astype(a.dtype).tobytes()


def check(case) -> str | None:
    ctx = ModelContext.of(case.model)
    session = EmulationSession(ctx, capture_intermediates=False)
    ref = run_fp32(ctx, [case.feeds]).outputs[0]
    off = session.run(None, case.feeds)
    if not all(same(off[k], ref[k]) for k in ref):
        return "all switches off differs from the FP32 model"
    plan = uniform_plan([r.name for r in walk_nodes(case.model.graph)], Precision.FP16, Reason("default", ""))
    want = run_emulated(ModelContext.of(harness.all_fp16(case.model)), [case.feeds]).outputs[0]
    got = session.run(plan, case.feeds)
    if not all(same(got[k], want[k]) for k in want):
        return "all-FP16 plan differs from the emulated written model"
    return None


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    failures: dict[str, list[str]] = collections.defaultdict(list)
    selected = 0
    for name, case in sorted(harness.node_cases().items()):
        if harness.selection(name) is not None:
            continue
        selected += 1
        try:
            problem = check(case)
        except Exception as e:  # a case the oracle cannot build or run is a failure to report
            problem = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
        if problem:
            failures[problem].append(name)
    identical = selected - sum(map(len, failures.values()))
    print(f"{selected} selected node cases; {identical} bit-identical both ways")
    for problem, names in failures.items():
        print(f"  {len(names)} x {problem}: {', '.join(names[:5])}")


if __name__ == "__main__":
    main()
