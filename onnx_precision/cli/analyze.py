"""``onnx-precision analyze``: which nodes break in FP16 and why.

Exit 0 whenever the analysis ran, whatever it found (a gate is ``check``'s job); 2 for errors.
"""

from __future__ import annotations

import argparse

from ..options import GenerationOptions, Judging
from ..target import Targeting
from . import common


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="show numerically risky nodes, value ranges and FP16 errors")
    p.add_argument("model", help="the FP32 ONNX model")
    p.add_argument("--json", metavar="FILE", help="write the analysis as JSON; - for standard output (the "
                                                  "lines then go to standard error)")
    p.add_argument("--all", action="store_true", help="list every node, not only those at risk")
    common.add_sample_args(p)
    for group in (Judging, Targeting, GenerationOptions):  # as convert and check take them
        common.add_group(p, group)
    common.add_verbosity_args(p, quiet_help="print only the headline (verdict counts) and errors")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .. import analysis
    from ..run_inputs import protected_paths

    spec = common.sample_spec(args)
    result = analysis.analyze(args.model, spec, judging=common.group_of(args, Judging),
                              targeting=common.group_of(args, Targeting),
                              generation=common.group_of(args, GenerationOptions))
    out = None
    if args.json:
        # Before printing: a bad path fails with nothing half-done.
        inputs = protected_paths(files=common.custom_op_libraries(args), samples=(spec.inputs,))
        out = common.write_json(args.json, result.dumps(), lambda: result.write_json(args.json, inputs))
    if args.quiet:
        common.show(result.headline(), out)
    else:
        common.show(result.table_lines(all_rows=args.all or args.verbose > 0), out)
        if args.verbose:
            common.show(result.skipped_lines(), out)
    common.print_warnings(result.warnings, args)
    return 0
