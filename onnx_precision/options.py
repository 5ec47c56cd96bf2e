"""Option groups shared by the commands: one definition of each, as a frozen value that checks itself.

``convert``, ``check`` and ``analyze`` compose the groups they need, on the command line
(:func:`onnx_precision.cli.common.add_group` builds each argparse group from its fields) and in the
Python API (:class:`~onnx_precision.convert.ConvertOptions`, :class:`~onnx_precision.check.CheckOptions`,
:class:`~onnx_precision.analysis.AnalyzeOptions`), so an option added to a group is one field there: it
reaches every command that takes the group, with its flag, its check and its spelling in the commands a
run suggests (:meth:`Group.cli_args`). The groups:

* the sample data: :class:`~onnx_precision.data.SampleSpec` (its flags: ``cli.common.add_sample_args``);
* :class:`Judging`: what a measuring run judges by, and the model it measures (:mod:`onnx_precision.basis`);
* :class:`~onnx_precision.target.targeting.Targeting`: where the written model runs, and the kernels every
  session registers;
* :class:`Output`: the files ``convert`` writes besides the model.

A field carries its :class:`Flag`: its flags, its help, how its text is read, and what its value must be,
one function that the group's ``__post_init__`` and the argparse type both call. A field without one (the
tolerance, the target) is read from several flags by the CLI.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from .errors import UsageError
from .judge import Tolerance

# measured: an all-FP16 remainder adds 0.3% (a QDQ MLP) to 27% (a 4-layer ViT-like block)
DEFAULT_MARGIN = 0.3


def margin_problem(margin: object) -> str:
    """What ``margin`` should be, where it is no --quant-margin ("" when it is one)."""
    ok = isinstance(margin, (int, float)) and not isinstance(margin, bool) and 0 <= margin <= 10
    return "" if ok else "a fraction between 0 and 10"


@dataclass(frozen=True)
class Flag:
    """How one option is spelled on the command line, and what its value must be: ``problem(value)`` says
    what is expected ("" when the value is fine), for the group's own check and the argparse type alike;
    ``parse`` reads a flag's text (None: a switch, True when given)."""

    flags: tuple[str, ...]
    help: str
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    problem: Callable[[Any], str] | None = None

    def spelled(self, value: Any) -> list[str]:
        """How a suggested command repeats ``value`` (a switch: its flag alone)."""
        if self.parse is None:
            return [self.flags[0]]
        return [self.flags[0], repr(value) if isinstance(value, float) else str(value)]


def flag(*flags: str, help: str, metavar: str | None = None, parse: Callable[[str], Any] | None = None,
         problem: Callable[[Any], str] | None = None) -> Mapping[str, Flag]:
    """A field's metadata: its :class:`Flag`."""
    return {"flag": Flag(flags, help, metavar, parse, problem)}


def flag_of(f: dataclasses.Field) -> Flag | None:
    """The field's :class:`Flag`, or None for a field the CLI reads from several flags."""
    found = f.metadata.get("flag")
    return found if isinstance(found, Flag) else None


def default_of(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def switch_problem(value: object) -> str:
    return "" if isinstance(value, bool) else "True or False"


def path_problem(value: object) -> str:
    return "" if value is None or isinstance(value, str) else "the path of a file (a str), or None"


class Group:
    """An option group, a frozen dataclass: a field with a :class:`Flag` is checked as the flag's type checks
    its text, in one line naming the flag."""

    title: ClassVar[str]  # the argparse group's title

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            spec, value = flag_of(f), getattr(self, f.name)
            problem = spec.problem(value) if spec is not None and spec.problem is not None else ""
            if spec is not None and problem:
                raise UsageError(f"{spec.flags[0]} {value!r}: expected {problem}")

    def cli_args(self) -> list[str]:
        """The flags that give this group's values in a suggested command, those at their defaults left
        out; a field without a flag spells itself (its ``cli_args()``)."""
        args: list[str] = []
        for f in fields(self):  # type: ignore[arg-type]
            value, spec = getattr(self, f.name), flag_of(f)
            if spec is None:
                args += value.cli_args()
            elif value != default_of(f) and value is not None:
                args += spec.spelled(value)
        return args


@dataclass(frozen=True)
class Judging(Group):
    """What a run judges by, and the model it measures: the tolerance; for a quantized model, the reference
    its 16-bit remainder is judged against (its unquantized original, else the model with its activation
    quantizers bypassed) and what the remainder may add to the quantization error (:mod:`.quant_reference`);
    and the model as measured: a BF16 run's opset raised or kept (:mod:`.opset_upgrade`), its float64
    compute converted or kept."""

    title: ClassVar[str] = "judging"

    tolerance: Tolerance = field(default_factory=Tolerance)
    reference_model: str | None = field(default=None, metadata=flag(
        "--reference-model", metavar="ORIGINAL.onnx", parse=str, problem=path_problem,
        help="a quantized model's unquantized FP32 original (same inputs and outputs): the 16-bit remainder "
             "is judged against it, relative to the quantization error (without it, against the model with "
             "its activation quantizers bypassed)"))
    quant_margin: float = field(default=DEFAULT_MARGIN, metadata=flag(
        "--quant-margin", metavar="FRACTION", parse=float, problem=margin_problem,
        help="a quantized model: what the 16-bit remainder may add to the quantization error of each output "
             "(default 0.3: its rel RMS err at most 1.3x the QDQ model's)"))
    keep_opset: bool = field(default=False, metadata=flag(
        "--keep-opset", problem=switch_problem,
        help="with bf16 (--low-precision or --fallback): refuse a model whose opset gives some of its ops no "
             "bfloat16 type (Conv: opset 22), instead of raising its opset and verifying the raised model "
             "against it"))
    keep_float64: bool = field(default=False, metadata=flag(
        "--keep-float64", problem=switch_problem,
        help="leave every node that computes in float64 as it is (by default float64 compute is converted "
             "and verified like float32 compute)"))

    def __post_init__(self) -> None:
        if not isinstance(self.tolerance, Tolerance):
            raise UsageError(f"tolerance {self.tolerance!r}: expected an onnx_precision.judge.Tolerance")
        super().__post_init__()


@dataclass(frozen=True)
class Output(Group):
    """The files ``convert`` writes besides the model, and how it lays out the model's weights."""

    title: ClassVar[str] = "output"

    external_data: bool = field(default=False, metadata=flag(
        "--external-data", problem=switch_problem,
        help="write weights to OUTPUT.data beside the model (always on for models over 2 GB)"))
    trt_flags_path: str | None = field(default=None, metadata=flag(
        "--trt-flags", metavar="FILE", parse=str, problem=path_problem,
        help="write TensorRT flags for the plan to FILE"))
    plan_out: str | None = field(default=None, metadata=flag(
        "--save-plan", metavar="PLAN.json", parse=str, problem=path_problem,
        help="write the final precision plan"))
    report_json: str | None = field(default=None, metadata=flag(
        "--report", metavar="FILE.json", parse=str, problem=path_problem,
        help="static/auto: the JSON report (default: OUTPUT with .report.json)"))
    report_md: str | None = field(default=None, metadata=flag(
        "--report-md", metavar="FILE.md", parse=str, problem=path_problem,
        help="static/auto: the Markdown report (default: OUTPUT with .report.md)"))
    # the feeds the run used, as Polygraphy JSON (--save-inputs); the FP32 reference outputs (--save-outputs)
    save_inputs: str | None = field(default=None, metadata=flag(
        "--save-inputs", metavar="FILE", parse=str, problem=path_problem,
        help="static/auto: write the feeds used (read or synthesised) as Polygraphy JSON, for 'polygraphy "
             "run --load-inputs'"))
    save_outputs: str | None = field(default=None, metadata=flag(
        "--save-outputs", metavar="FILE", parse=str, problem=path_problem,
        help="static/auto: write the FP32 model's outputs on them as Polygraphy JSON, for 'polygraphy run "
             "--load-outputs'"))


def model_path(value: object, role: str = "model", hint: str = "") -> str:
    """``value`` as the path of a model file an entry point reads, else a one-line UsageError naming
    ``role`` and what was given (``hint``: what to do instead)."""
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise UsageError(f"{role}: expected the path of an .onnx file; got {type(value).__name__}{hint}")


class Composed:
    """A command's options, a frozen dataclass (``init=False``) some of whose fields are groups: each field
    is given by keyword, and a group's field may also be given by its own name (``tolerance=...``,
    ``target=...``), as the options were given before the groups; it lands in its group, which checks it.
    ``__post_init__``, where the class has one, checks the rest."""

    def __init__(self, **given: Any) -> None:
        own = {f.name: f for f in fields(self)}  # type: ignore[arg-type]
        values = {name: given.pop(name) if name in given else default_of(f) for name, f in own.items()}
        for name, value in given.items():
            group = next((g for g, v in values.items() if isinstance(v, Group)
                          and name in {f.name for f in fields(v)}), None)  # type: ignore[arg-type]
            if group is None:
                raise UsageError(f"{type(self).__name__}: no option {name!r}")
            values[group] = dataclasses.replace(values[group], **{name: value})
        for name, value in values.items():
            object.__setattr__(self, name, value)
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()
