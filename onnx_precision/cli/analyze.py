"""``onnx-precision analyze``: which nodes break in FP16 and why."""

from __future__ import annotations

import argparse

from . import common


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="show numerically risky nodes, value ranges and FP16 errors")
    p.add_argument("model", help="the FP32 ONNX model")
    p.add_argument("--json", metavar="FILE", help="write the analysis as JSON")
    common.add_sample_args(p)
    common.add_tolerance_args(p)
    common.add_verbosity_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .. import analysis

    result = analysis.analyze(args.model, common.sample_spec(args), common.tolerance(args))
    print(result.table())
    if args.json:
        result.write_json(args.json)
    return 0
