"""Conformance figures over the ONNX backend node suite: our all-fp16 conversion against
onnxconverter-common's convert_float_to_float16, on the same selection.

Usage: python scripts/conformance.py [--verbose] [NAME_SUBSTRING]
Prints the selection counts, then for each converter how many cases pass and the failures.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import conformance_harness as h  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("filter", nargs="?", default="")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    cases = {n: c for n, c in h.node_cases().items() if args.filter in n}
    selected = [name for name in sorted(cases) if h.selection(name) is None]
    not_selected = h.left_out(cases)
    print(f"node cases: {len(cases)}; selected: {len(selected)}")
    for why, n in not_selected.most_common():
        print(f"  not selected ({n}): {why}")
    converters = [("onnx-precision all-fp16", h.all_fp16)]
    if not args.no_baseline:
        converters.append(("onnxconverter-common convert_float_to_float16", h.onnxconverter_fp16))
    for label, convert in converters:
        start = time.perf_counter()
        failures = {}
        for name in selected:
            problem = h.check_conversion(cases[name], convert)
            if problem is not None:
                failures[name] = problem
        passed = len(selected) - len(failures)
        print(f"{label}: {passed}/{len(selected)} pass ({100.0 * passed / max(1, len(selected)):.1f}%), "
              f"{time.perf_counter() - start:.1f}s")
        kinds = collections.Counter(p.split(":")[0] for p in failures.values())
        for kind, n in kinds.most_common():
            print(f"  failing ({n}): {kind}")
        if args.verbose:
            for name, problem in failures.items():
                print(f"    {name}: {problem}")
    light_models(converters)
    return 0


def light_models(converters) -> None:
    """The light models shipped with onnx: valid (full checker), runs, outputs close (cosine > 0.999)."""
    import numpy as np
    import onnx
    for label, convert in converters:
        passed = []
        for path in h.light_models():
            case = h.light_case(path)
            try:
                converted = convert(case.model)
                onnx.checker.check_model(converted, full_check=True)
                ref, got = h.run_model(case.model, case.feeds)[0], h.run_model(converted, case.feeds)[0]
                a, b = ref.astype(np.float64).ravel(), got.astype(np.float64).ravel()
                if a @ b / (np.linalg.norm(a) * np.linalg.norm(b) or 1.0) > 0.999:
                    passed.append(case.name)
            except Exception as e:  # a failing converter is a data point, not a crash
                first_line = str(e).splitlines()[0][:120] if str(e) else ""
                print(f"    {case.name}: {type(e).__name__}: {first_line}")
        print(f"{label}: light models {len(passed)}/{len(h.light_models())} pass")


if __name__ == "__main__":
    sys.exit(main())
