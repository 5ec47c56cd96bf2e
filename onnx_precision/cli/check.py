"""``onnx-precision check``: gate a candidate FP16/mixed model against the FP32 model."""

from __future__ import annotations

import argparse

from ..options import GenerationOptions, Judging
from ..target import ORACLE_NAMES, Targeting
from . import common


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check", help="compare a candidate FP16 model with the FP32 model (exit 1 if out of tolerance)"
    )
    p.add_argument("model", help="the FP32 ONNX model")
    p.add_argument("candidate", help="the FP16 or mixed-precision model to check")
    p.add_argument(
        "--oracle",
        choices=ORACLE_NAMES,
        default="emulate",
        help="emulate FP16 on CPU (default), run natively on a provider (cuda, tensorrt, webgpu), or in "
             "onnx.reference with FP16 arithmetic inside every op (reference: slow, pessimistic)",
    )
    p.add_argument("--json", metavar="FILE",
                   help="also write the result as JSON (format onnx-precision-check/1); - for standard "
                        "output (the lines then go to standard error)")
    common.add_sample_args(p)
    for group in (Judging, Targeting, GenerationOptions):  # as convert and analyze take them
        common.add_group(p, group)
    p.set_defaults(target=None)  # none named: the target the candidate records (CheckOptions.recorded_target)
    common.add_verbosity_args(
        p, quiet_help="print only the verdict line: passed/failed, the worst output and its statistic, the "
                      "candidate's 16-bit share (and errors)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .. import check as check_lib

    named = args.target is not None  # --target: judged there, whatever the candidate records
    args = argparse.Namespace(**{**vars(args), "target": args.target or "generic"})
    result = check_lib.check(args.model, args.candidate, common.sample_spec(args), oracle=args.oracle,
                             judging=common.group_of(args, Judging),
                             targeting=common.group_of(args, Targeting), recorded_target=not named,
                             generation=common.group_of(args, GenerationOptions))
    out = None
    if args.json:  # before printing: a bad path fails with nothing half-done
        import json

        from ..run_inputs import protected_paths
        from ..storage import write_text

        inputs = protected_paths(models=(args.model, args.candidate, args.reference_model),
                                 files=common.custom_op_libraries(args),
                                 samples=(common.sample_spec(args).inputs,))
        text = json.dumps(result.to_json(result.tolerance), indent=2) + "\n"
        out = common.write_json(args.json, text, lambda: write_text(args.json, text, inputs))
    common.show([result.verdict_line()] if args.quiet else result.lines(), out)
    if args.verbose:
        common.show(result.detail_lines(result.tolerance), out)
    common.print_warnings(result.all_warnings, args, quiet_too=True)  # each qualifies what the verdict says
    return 0 if result.passed else 1
