"""Argument groups shared by subcommands: sample data, tolerance, verbosity; and how they print."""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import Field, fields
from typing import Any, Callable, TextIO, TypeVar

import numpy as np

from ..data import SampleSpec, shape_problem
from ..errors import UsageError
from ..float_types import LOW_PRECISIONS, low_of
from ..judge import ERROR_STATS, SLICE_MIN_ELEMENTS, Tolerance, bound_problem, statistics_help
from ..options import Flag, Group, default_of, flag_of
from ..render import for_terminal
from ..target import KINDS, Target, target_help, target_named
from ..trt.versions import NEWEST, TrtVersion


def _entries(text: str) -> list[tuple[str, str]]:
    """(name, value) of each ``NAME:VALUE`` in a comma list, as trtexec writes them
    (``x:1x3x224x224,y:1x10``); commas inside brackets (Polygraphy's ``x:[1,3,224,224]``) and
    after a value without a name (``x:-1,1``) belong to the value. A name may hold colons (``input:0``,
    as TensorFlow exporters name inputs): the value starts after the last one."""
    entries: list[tuple[str, str]] = []
    for token in _top_level_commas(text):
        name, sep, value = token.rpartition(":")
        if sep and name and "[" not in name:
            entries.append((name, value))
        elif entries:
            entries[-1] = (entries[-1][0], f"{entries[-1][1]},{token}")
        else:
            entries.append(("", token))
    return entries


def _top_level_commas(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _numbers(value: str, separator: str) -> list[str]:
    """The items of ``[a,b,...]`` (Polygraphy's form) or of ``a<separator>b...`` (ours)."""
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        return value[1:-1].split(",")
    return value.lower().split(separator)


def shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    out = []
    for name, dims in _entries(text):
        try:
            shape = tuple(int(d) for d in _numbers(dims, "x"))
        except ValueError:
            shape = ()
        if not name or not shape or any(d <= 0 for d in shape):
            raise argparse.ArgumentTypeError(f"'{text}': expected NAME:DIMxDIMx... or NAME:[DIM,DIM,...], "
                                             f"several separated by commas, e.g. x:1x3x224x224")
        problem = shape_problem(shape)  # as SampleSpec and ConvertOptions check it
        if problem:
            raise argparse.ArgumentTypeError(f"'{text}': {problem}")
        out.append((name, shape))
    return out


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{text}': expected an integer >= 0")
    return value


def _ranges(text: str) -> list[tuple[str, tuple[float, float]]]:
    out = []
    for name, bounds in _entries(text):
        try:
            lo, hi = (float(v) for v in _numbers(bounds, ","))
        except ValueError:
            lo = hi = float("nan")
        # Bounds beyond float32's range would make infinite float inputs (and overflow numpy's uniform).
        if not name or not -_FLOAT32_MAX <= lo < hi <= _FLOAT32_MAX:
            raise argparse.ArgumentTypeError(f"'{text}': expected NAME:LO,HI or NAME:[LO,HI] with LO < HI, "
                                             f"both finite float32 values, e.g. x:-1,1")
        out.append((name, (lo, hi)))
    return out


def _float_between(lo: float, hi: float, expected: str) -> Callable[[str], float]:
    """An argparse type: a finite float in [lo, hi], else a usage error saying ``expected`` (an
    infinite tolerance would pass anything, and JSON reports cannot hold it)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (math.isfinite(value) and lo <= value <= hi):
            raise argparse.ArgumentTypeError(f"'{text}': expected {expected}")
        return value
    return parse


positive_float = _float_between(1e-9, math.inf, "a finite number > 0")
percentage = _float_between(0.0, 100.0, "a percentage between 0 and 100")


def add_sample_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sample data")
    group.add_argument("--inputs", "--load-inputs", metavar="DATA",
                       help="an .npz (one feed), a directory of .npz files (one feed each), or a "
                            "Polygraphy JSON from 'polygraphy run --save-inputs'; default: synthetic feeds")
    group.add_argument("--seed", type=_seed, default=0, help="seed for synthetic feeds (default 0)")
    group.add_argument("--input-shape", type=shapes, action="append", default=[], metavar="NAME:1x3x224x224",
                       help="shape of a synthetic input with symbolic dimensions; also NAME:[1,3,224,224] "
                            "and comma lists (x:1x3,y:1x10); repeatable")
    group.add_argument("--input-shapes", dest="input_shape", type=shapes, action="extend", nargs="+",
                       metavar="NAME:[1,3,224,224]", help="the same, as Polygraphy spells it")
    group.add_argument("--input-range", type=_ranges, action="append", default=[], metavar="NAME:LO,HI",
                       help="value range of a synthetic input; also NAME:[LO,HI] and comma lists; "
                            "repeatable (default [0, 1) for floats, [0, 100) for integers, or below the size "
                            "of the table an integer input indexes)")
    group.add_argument("--val-range", dest="input_range", type=_ranges, action="extend", nargs="+",
                       metavar="NAME:[LO,HI]", help="the same, as Polygraphy spells it")


def sample_spec(args: argparse.Namespace) -> SampleSpec:
    return SampleSpec(inputs=args.inputs, seed=args.seed,
                      input_shapes=dict(pair for given in args.input_shape for pair in given),
                      input_ranges=dict(pair for given in args.input_range for pair in given))


def add_group(parser: argparse.ArgumentParser, group: type[Group]) -> None:
    """The flags of an option group (:mod:`...options`), from its definition: a field with a
    :class:`~onnx_precision.options.Flag` is that flag, its argparse type the field's own check; the
    tolerance and the target are read from several flags (:func:`add_tolerance_args`,
    :func:`add_runtime_args`)."""
    section = parser.add_argument_group(group.title)
    for f in fields(group):  # type: ignore[arg-type]
        spec = flag_of(f)
        if spec is None:
            _READ[f.name][0](parser)
        elif spec.parse is None:
            section.add_argument(*spec.flags, dest=f.name, action="store_true", help=spec.help)
        elif spec.repeated:
            section.add_argument(*spec.flags, dest=f.name, type=_checked(spec), action="append", default=[],
                                 metavar=spec.metavar, help=spec.help)
        else:
            section.add_argument(*spec.flags, dest=f.name, type=_checked(spec), default=default_of(f),
                                 metavar=spec.metavar, help=spec.help)


G = TypeVar("G", bound=Group)


def group_of(args: argparse.Namespace, group: type[G]) -> G:
    """The option group ``group`` of the parsed flags (:func:`add_group` added them)."""
    def value(f: Field) -> Any:
        spec = flag_of(f)
        if spec is None:
            return _READ[f.name][1](args)
        given = getattr(args, f.name)
        return tuple(given) if spec.repeated else given
    return group(**{f.name: value(f) for f in fields(group)})  # type: ignore[arg-type]


def _checked(spec: Flag) -> Callable[[str], Any]:
    """An argparse type for ``spec``: its text read, then checked as the group checks the value."""
    def parse(text: str) -> Any:
        try:
            value = spec.parse(text) if spec.parse is not None else text
        except ValueError:
            value = text  # not even of its kind: its check names what is expected
        problem = spec.problem(value) if spec.problem is not None else ""
        if problem:
            raise argparse.ArgumentTypeError(f"'{text}': expected {problem}")
        return value
    return parse


def add_runtime_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ort-custom-op-library", action="append", default=[], metavar="PATH",
                        help="a shared library of onnxruntime kernels for the model's custom ops, registered "
                             "on every session (repeatable)")
    parser.add_argument("--target", choices=KINDS, default="generic", help=target_help())
    parser.add_argument("--trt-version", type=_trt_version, default=NEWEST, metavar="X.Y",
                        help=f"with --target tensorrt: the release whose parser is followed "
                             f"(default {NEWEST})")
    parser.add_argument("--low-precision", choices=tuple(LOW_PRECISIONS), default="fp16",
                        help="the 16-bit type: fp16 (default; 10 fraction bits, overflows past 65504) or "
                             "bf16 (FP32's range with 7 fraction bits: it never overflows where FP32 does "
                             "not, it loses precision instead; needs opset 13, runs on GPUs since Ampere)")


def custom_op_libraries(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(args.ort_custom_op_library)


def _trt_version(text: str) -> TrtVersion:
    try:
        return TrtVersion.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def target(args: argparse.Namespace) -> Target:
    """The target of ``--target`` (and ``--trt-version``, ``--low-precision``, ``--fallback``)."""
    fallback = getattr(args, "fallback", "fp32")
    low = low_of(args.low_precision)
    if fallback != "fp32" and low_of(fallback) is low:
        raise UsageError(f"--fallback {fallback} with --low-precision {args.low_precision}: the fallback is "
                         f"tried where {low.name} fails, so it must be another type (--low-precision fp16)")
    return target_named(args.target, args.trt_version, low, None if fallback == "fp32" else low_of(fallback))


def _per_output(parse: Callable[[str], Any]) -> Callable[[str], tuple[str | None, Any]]:
    """An argparse type for ``[NAME:]VALUE``: VALUE for every output, or for output NAME only (the
    name is everything before the last ':', so names such as 'logits:0' work)."""
    def parse_named(text: str) -> tuple[str | None, Any]:
        name, sep, value = text.rpartition(":")
        if sep and not name:
            raise argparse.ArgumentTypeError(f"'{text}': expected [NAME:]VALUE with a non-empty NAME")
        return (name if sep else None), parse(value)
    return parse_named


def _error_stat(text: str) -> str:
    if text not in ERROR_STATS:
        raise argparse.ArgumentTypeError(f"'{text}': expected one of {', '.join(ERROR_STATS)}")
    return text


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}': expected an integer >= 1")
    return value


def _setting(name: str) -> Callable[[str], float]:
    """An argparse type for Tolerance setting ``name``: a number within its bounds
    (:data:`~onnx_precision.judge.settings.BOUNDS`, which Tolerance checks too)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        problem = bound_problem(name, value)
        if problem:
            raise argparse.ArgumentTypeError(f"'{text}': expected {problem}")
        return value
    return parse

# flag -> (Tolerance field, parser of VALUE, metavar, help); each takes [NAME:]VALUE and repeats.
_TOLERANCE_ARGS: dict[str, tuple[str, Callable[[str], Any], str, str]] = {
    "--error-stat": (
        "error_stat",
        _error_stat,
        "STAT",
        "the check: " + statistics_help(),
    ),
    "--atol": ("atol", _setting("atol"), "X", "absolute error allowance"),
    "--rtol": (
        "rtol",
        _setting("rtol"),
        "X",
        (
            "relative error allowance (max, mean, median, quantile: relative "
            "to the FP32 output's max|ref|; elemwise: to each element's |ref|)"
        ),
    ),
    "--min-cosine": ("min_cosine", _setting("min_cosine"), "C",
                     "max, mean, median, quantile: minimum cosine similarity"),
    "--max-rel-rms": (
        "max_rel_rms",
        _setting("max_rel_rms"),
        "X",
        "rms: maximum relative RMS error of the whole output",
    ),
    "--max-slice-rel-rms": (
        "max_slice_rel_rms",
        _setting("max_slice_rel_rms"),
        "X",
        (
            "rms: maximum relative RMS error of any slice (whole rows of the last axis, "
            f"at least {SLICE_MIN_ELEMENTS} elements; judged against the larger of the "
            "slice's and the output's RMS)"
        ),
    ),
    "--error-quantile": ("error_quantile", _setting("error_quantile"), "Q",
                         "quantile: which quantile of |err| is checked"),
    "--max-outside-fraction": (
        "max_outside_fraction",
        _setting("max_outside_fraction"),
        "F",
        "elemwise: share of the elements allowed outside atol + rtol x |ref|",
    ),
    "--top-k": (
        "top_k",
        positive_int,
        "K",
        "also require FP32's top-1 class (along the last axis) to be in the candidate's top K",
    ),
    "--min-top-k-agreement": ("min_top_k_agreement", _setting("min_top_k_agreement"), "F",
                              "share of rows that must pass --top-k"),
    "--threshold": (
        "threshold",
        _setting("threshold"),
        "T",
        "also require the map thresholded at T (x > T) to agree: IoU >= --min-iou",
    ),
    "--min-iou": ("min_iou", _setting("min_iou"), "F", "minimum IoU for --threshold"),
}


def add_tolerance_args(parser: argparse.ArgumentParser) -> None:
    default = Tolerance()
    group = parser.add_argument_group(
        "tolerance (every option takes VALUE for all outputs or NAME:VALUE for one output, and repeats; "
        "an output never passes with new NaN/Inf)"
    )
    for flag, (field, parse, metavar, text) in _TOLERANCE_ARGS.items():
        flags = [flag, "--check-error-stat"] if flag == "--error-stat" else [flag]  # Polygraphy's name too
        group.add_argument(
            *flags,
            dest=field,
            type=_per_output(parse),
            action="append",
            default=[],
            metavar=f"[NAME:]{metavar}",
            help=f"{text} (default {_shown(getattr(default, field))})",
        )
    group.add_argument(
        "--allow-fp32-nonfinite",
        action="store_true",
        help="compare only where the FP32 outputs are finite, instead of refusing an FP32 model "
        "whose outputs are NaN/Inf on the samples",
    )


def _shown(value: Any) -> str:
    if value is None or (value == 0 and not isinstance(value, float)):
        return "off"  # --top-k, --threshold
    return f"{value:g}" if isinstance(value, float) else str(value)


def tolerance(args: argparse.Namespace) -> Tolerance:
    """The Tolerance of the parsed options: unnamed values first, then each output's own."""
    everyone: dict[str, Any] = {}
    named: dict[str, dict[str, Any]] = {}
    for field, *_ in _TOLERANCE_ARGS.values():
        for name, value in getattr(args, field):
            (everyone if name is None else named.setdefault(name, {}))[field] = value
    tol = Tolerance(**everyone, allow_fp32_nonfinite=args.allow_fp32_nonfinite)
    for name, changes in named.items():
        tol = tol.with_output(name, **changes)
    return tol


# The fields of a group that several flags give: field -> (what adds those flags, what reads the value).
# The target's flags add the custom-op libraries' too (the Targeting group's two fields).
_READ: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], Any]]] = {
    "tolerance": (add_tolerance_args, tolerance),
    "target": (add_runtime_args, target),
    "custom_op_libraries": (lambda parser: None, custom_op_libraries),
}


def write_json(path: str, text: str, write: Callable[[], None]) -> TextIO | None:
    """``--json PATH``: ``write()`` writes the JSON ``text`` to the file, or for ``-`` it goes to standard
    output alone, where a pipe reads it. Returns where the command's own lines go then: standard error
    for ``-``, else None (standard output)."""
    if path != "-":
        write()
        return None
    sys.stdout.write(text)
    sys.stdout.flush()
    return sys.stderr


def show(lines: Iterable[str], file: TextIO | None = None) -> None:
    """Print each of ``lines`` as one line of the terminal (:func:`..render.for_terminal`), on stdout
    or ``file``: every line the commands print passes here, since a name from the model, and any
    sentence quoting one, may hold a newline or an escape sequence."""
    for line in lines:
        print(for_terminal(line), file=file)


class TerminalFormatter(logging.Formatter):
    """Log lines rendered for the terminal as :func:`show` renders (a traceback, with -v, keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return for_terminal(super().formatMessage(record))


def print_warnings(warnings: Sequence[str], args: argparse.Namespace, quiet_too: bool = False) -> None:
    """Each warning once, on stderr (stdout holds the results), unless -q; ``quiet_too``: under -q as well
    (warnings that change what the verdict means)."""
    if quiet_too or not args.quiet:
        show((f"onnx-precision: warning: {w}" for w in dict.fromkeys(warnings)), sys.stderr)


def add_verbosity_args(parser: argparse.ArgumentParser, quiet_help: str = "print only errors") -> None:
    parser.add_argument("-q", "--quiet", action="count", default=0, help=quiet_help)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="print more detail")
