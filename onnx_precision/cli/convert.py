"""``onnx-precision convert``: FP32 model in, FP16 model (with FP32 pins) out."""

from __future__ import annotations

import argparse

from .. import convert as convert_lib
from ..options import GenerationOptions, Judging, Output
from ..target import ORACLE_NAMES, Targeting
from ..trt.layer_precisions import LayerFlags
from ..vocab import MODES
from . import common


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert an FP32 model to FP16, pinning unsafe nodes to FP32")
    p.add_argument("model", help="the FP32 ONNX model")
    p.add_argument("-o", "--output", required=True, help="where to write the FP16 model")
    p.add_argument("--mode", choices=MODES, default="auto",
                   help="auto (default): search the smallest FP32 set with which every sample passes, verify "
                        "the written model, write a report; static: pin nodes flagged by risk rules and "
                        "ranges, no search; all-fp16: every node that can be FP16 is, no check")
    p.add_argument("--keep-fp32", action="append", default=[], metavar="REGEX",
                   help="keep nodes whose name matches REGEX in FP32 (repeatable)")
    p.add_argument("--keep-fp32-op", action="append", default=[], metavar="OPTYPE",
                   help="keep every node of this op type in FP32 (repeatable)")
    p.add_argument("--plan", metavar="PLAN.json",
                   help="a precision plan to apply (from --save-plan or by hand), or REPORT.json@POINT: a "
                        "point of a report's trade-off")
    p.add_argument("--layer-precisions", "--layerPrecisions", dest="layer_precisions", action="extend",
                   nargs="+", default=[], metavar="LAYER:PRECISION",
                   help="TensorRT 10's per-layer precisions, as trtexec (--layerPrecisions=a:fp32,h*:fp32, "
                        "one '*' per name) or Polygraphy (a:float32 b:float32) spell them: the node of "
                        "an fp32 layer is pinned FP32; layers are named as onnx-tensorrt names them "
                        "(node_of_<first output> for an unnamed node, <name>_<k> for further layers); a name "
                        "that matches no layer is an error")
    p.add_argument("--layer-output-types", "--layerOutputTypes", dest="layer_output_types", action="extend",
                   nargs="+", default=[], metavar="LAYER:TYPES",
                   help="the same for trtexec's --layerOutputTypes (a:fp32+int64): an fp32 output pins the "
                        "node")
    p.add_argument("--layer-precisions-file", metavar="FILE",
                   help="the same flags read from FILE: a trtexec or Polygraphy command line, a build "
                        "script, or a --trt-flags file")
    p.add_argument(
        "--fp16-io",
        action="store_true",
        help="make FP32 graph inputs and outputs FP16 (default: they stay FP32)",
    )
    for which, default in (("min", "smallest"), ("opt", "most common"), ("max", "largest")):
        # --max-shapes: the same profile maximum for any target (the plan is made to hold up to it)
        neutral = ["--max-shapes"] if which == "max" else []
        p.add_argument(f"--trt-{which}-shapes", f"--{which}Shapes", *neutral, dest=f"trt_{which}_shapes",
                       type=common.shapes, action="extend", nargs="+", default=[],
                       metavar="NAME:[1,3,224,224]",
                       help=f"the {which} shape of a dynamic input in the TensorRT flags' profile "
                            f"(Polygraphy's syntax, or trtexec's NAME:1x3x224x224 and comma lists); default: "
                            f"the samples' {default} shape" + ("; the plan is made to hold up to it on any "
                                                               "target" if neutral else ""))
    p.add_argument(
        "--headroom",
        type=float,
        default=convert_lib.ConvertOptions.headroom,
        help="static/auto: also pin nodes whose FP32 activations exceed 65504/H on the samples, "
        "since unseen inputs will be larger (default %(default)g: one binade of margin; 0: off)",
    )
    p.add_argument(
        "--oracle",
        choices=ORACLE_NAMES,
        default="emulate",
        help="also check the written model natively on a provider (cuda, tensorrt: needs "
             "onnxruntime-gpu; webgpu: a build with WebGPU) or in onnx.reference (reference: FP16 "
             "arithmetic inside every op)",
    )
    p.add_argument("--fallback", choices=("fp32", "bf16"), default="fp32",
                   help="where a node goes when it fails in FP16: fp32 (default), or bf16 first, FP32 only "
                        "where BF16 fails too (range failures, such as overflow past 65504, end in BF16; "
                        "precision failures in FP32; --mode auto measures which)")
    p.add_argument("--min-16bit-share", type=common.percentage, metavar="PERCENT",
                   help="static/auto: fail (exit 1) when the written plan keeps less than PERCENT of the "
                        "estimated FLOPs in 16 bits (the share the summary gives); the model and reports are "
                        "still written and say so")
    p.add_argument("--max-probes", type=common.positive_int, metavar="N",
                   help="auto: stop the search after N probes and keep the cheapest passing plan found")
    p.add_argument("--time-budget", type=common.positive_float, metavar="SECONDS",
                   help="auto: stop the search after this long and keep the cheapest passing plan found")
    p.add_argument("--exhaustive-minimise", action="store_true",
                   help="auto: shrink the pinned set until no single pin can be dropped, however many it "
                        "holds (by default a set of over 256 pins is shrunk by groups down to 1%% of the "
                        "estimated FLOPs, then pin by pin while that wins, and a note says what was not "
                        "tried alone)")
    common.add_sample_args(p)
    p.add_argument("--validation-inputs", metavar="DATA",
                   help="held-out samples (as --inputs) that the search never sees: the written model is "
                        "verified on them too, reported apart, and a failing one fails the run")
    for group in (Judging, Targeting, Output, GenerationOptions):  # as check and analyze (but the files)
        common.add_group(p, group)
    common.add_verbosity_args(p, quiet_help="print only the verdict line (and errors)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    options = convert_lib.ConvertOptions(
        mode=args.mode,
        keep_fp32=tuple(args.keep_fp32),
        keep_fp32_ops=tuple(args.keep_fp32_op),
        plan_path=args.plan,
        layer_flags=LayerFlags(tuple(args.layer_precisions), tuple(args.layer_output_types),
                               args.layer_precisions_file),
        fp16_io=args.fp16_io,
        samples=common.sample_spec(args),
        validation_inputs=args.validation_inputs,
        judging=common.group_of(args, Judging),
        targeting=common.group_of(args, Targeting),
        output=common.group_of(args, Output),
        generation=common.group_of(args, GenerationOptions),
        headroom=args.headroom,
        oracle=args.oracle,
        trt_profile=_profile(args),
        max_probes=args.max_probes,
        time_budget=args.time_budget,
        exhaustive_minimise=args.exhaustive_minimise,
        min_16bit_share=args.min_16bit_share,
    )
    from .progress import ProgressLine

    progress = ProgressLine(enabled=False if args.quiet else None, lines=args.verbose > 0).start()
    try:
        result = convert_lib.convert(args.model, args.output, options, progress)
    finally:
        progress.close()
    common.show([result.verdict_line()] if args.quiet else result.summary_lines())
    common.print_warnings(result.all_warnings, args)
    return result.exit_code


def _profile(args: argparse.Namespace) -> dict[str, dict[str, tuple[int, ...]]]:
    """--trt-min-shapes/--trt-opt-shapes/--trt-max-shapes as input -> {"min"|"opt"|"max": shape}."""
    profile: dict[str, dict[str, tuple[int, ...]]] = {}
    for which in ("min", "opt", "max"):
        for entries in getattr(args, f"trt_{which}_shapes"):
            for name, shape in entries:
                profile.setdefault(name, {})[which] = shape
    return profile
