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
* :class:`Output`: the files ``convert`` writes besides the model;
* :class:`GenerationOptions`: how a decoder or a streaming model is run over many steps (inferred by
  default, :mod:`onnx_precision.generation`), or ``--no-generation``.

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
    ``parse`` reads a flag's text (None: a switch, True when given); ``repeated``: the flag may be given
    several times, the field a tuple of what each gave (``problem`` checks each)."""

    flags: tuple[str, ...]
    help: str
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    problem: Callable[[Any], str] | None = None
    repeated: bool = False

    def spelled(self, value: Any) -> list[str]:
        """How a suggested command repeats ``value`` (a switch: its flag alone; a repeated flag: once per
        item)."""
        if self.parse is None:
            return [self.flags[0]]
        items = value if self.repeated else (value,)
        return [arg for item in items for arg in (self.flags[0], repr(item) if isinstance(item, float)
                                                  else str(item))]

    def check(self, value: Any) -> None:
        """Raise the one-line UsageError naming the flag where ``value`` is not what it must be (each item
        of a repeated flag's tuple checked as its flag's text is)."""
        if self.repeated and not isinstance(value, tuple):
            raise UsageError(f"{self.flags[0]} {value!r}: expected a tuple, one item per {self.flags[0]}")
        for item in value if self.repeated else (value,):
            problem = self.problem(item) if self.problem is not None else ""
            if problem:
                raise UsageError(f"{self.flags[0]} {item!r}: expected {problem}")


def flag(*flags: str, help: str, metavar: str | None = None, parse: Callable[[str], Any] | None = None,
         problem: Callable[[Any], str] | None = None, repeated: bool = False) -> Mapping[str, Flag]:
    """A field's metadata: its :class:`Flag`."""
    return {"flag": Flag(flags, help, metavar, parse, problem, repeated)}


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
            spec = flag_of(f)
            if spec is not None:
                spec.check(getattr(self, f.name))

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


def count_problem(value: object) -> str:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return "" if ok else "an integer >= 1"


def optional_count_problem(value: object) -> str:
    return "" if value is None else count_problem(value)


_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def memory_size(text: str) -> int:
    """``--memory-budget``'s text as bytes: a number with an optional unit, decimal as the run prints
    its figures (``8G`` and ``8GB`` are 8e9 bytes, ``512M``) or binary (``3.5GiB``); a ValueError where
    it is none."""
    spelled = text.strip().upper()
    binary = spelled.endswith("IB")
    spelled = spelled.removesuffix("IB" if binary else "B")
    unit = spelled[-1:] if spelled[-1:] in _UNITS and spelled[-1:] else ""
    number = float(spelled[:len(spelled) - len(unit)])
    scale = 1024 ** " KMGT".index(unit or " ") if binary else _UNITS[unit]
    return int(number * scale)


def budget_problem(value: object) -> str:
    ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 10**6)
    return "" if ok else "a memory size of at least 1M (8G, 512M, 3.5GiB), or None"


def feedback_problem(pair: object) -> str:
    """What a ``--feedback`` pair should be ("" when it has the form ``OUT=IN``; which ``=`` splits it is
    decided against the model, :func:`onnx_precision.generation.split_pair`: a tensor name may hold one)."""
    ok = isinstance(pair, str) and all(pair.partition("=")[::2]) and "=" in pair
    return "" if ok else ("OUT=IN, an output of the model and the input it feeds at the next step")


@dataclass(frozen=True)
class Judging(Group):
    """What a run judges by, and the model it measures: the tolerance; for a quantized model, the reference
    its 16-bit remainder is judged against (its unquantized original, else the model with its activation
    quantizers bypassed) and what the remainder may add to the quantization error (:mod:`.quant_reference`);
    the model as measured: a BF16 run's opset raised or kept (:mod:`.opset_upgrade`), its float64
    compute converted or kept; and the memory a run may hold (:mod:`.memory`: the default load's budget,
    the figure the summary holds the run's peak to, and what sample files may expand to:
    :func:`.data.files.sample_bound`)."""

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
    memory_budget: int | None = field(default=None, metadata=flag(
        "--memory-budget", metavar="SIZE", parse=memory_size, problem=budget_problem,
        help="the memory a run may hold (8G, 512M; weights are mapped from their files, not held): convert "
             "stops its load at onnxruntime's default options past it and says that load was not checked, "
             "and its memory note holds the run's peak to it (default: what the machine, and this process's "
             "cgroup, have available when the run starts); in every command, sample files may expand to an "
             "11th of it where that is over 512 MiB, their bound without it (a run holds about 11x its "
             "samples)"))

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


@dataclass(frozen=True)
class GenerationOptions(Group):
    """How a model that feeds its outputs back as inputs (a decoder's KV cache, a recurrent state) is run
    over many steps, over what is inferred from its names or its ``genai_config.json``
    (:func:`onnx_precision.generation.infer_generation`): ``feedback`` pairs ``OUT=IN`` (added, or replacing
    the inferred pair of that output or input), ``steps`` after the first, ``max_length`` (the length the
    plan is made to hold), ``chunk`` (a streaming model's chunk size), ``genai_config`` (a path; by default
    the ``genai_config.json`` beside the model, when there is one) and ``off`` (judge one forward pass, as
    for any model)."""

    title: ClassVar[str] = "generation (decoders and streaming models)"

    feedback: tuple[str, ...] = field(default=(), metadata=flag(
        "--feedback", metavar="OUT=IN", parse=str, problem=feedback_problem, repeated=True,
        help="output OUT of one step is input IN of the next (repeatable; over the pairs inferred from the "
             "model's names: present.N.key -> past_key_values.N.key, stateN -> state, ...)"))
    steps: int = field(default=64, metadata=flag(
        "--steps", metavar="K", parse=int, problem=count_problem,
        help="a generation is judged over its first step (the prefill, or first chunk) and K steps after it "
             "(default 64), each fed its own state"))
    max_length: int | None = field(default=None, metadata=flag(
        "--max-length", metavar="N", parse=int, problem=optional_count_problem,
        help="the length (tokens, or chunks) the plan must hold beyond the steps judged: what the run "
             "measured says fails before N is kept FP32, or the run says it cannot (default: "
             "genai_config.json's search.max_length, else none)"))
    chunk: int | None = field(default=None, metadata=flag(
        "--chunk", metavar="N", parse=int, problem=optional_count_problem,
        help="a streaming model: the elements of its signal fed per step, along its last axis (default: the "
             "input's declared last dimension); a longer sample is fed a chunk at a time"))
    genai_config: str | None = field(default=None, metadata=flag(
        "--genai-config", metavar="FILE", parse=str, problem=path_problem,
        help="onnxruntime-genai's genai_config.json describing the decoder (default: the one beside the "
             "model, when there is one)"))
    off: bool = field(default=False, metadata=flag(
        "--no-generation", problem=switch_problem,
        help="judge one forward pass on the samples, as for any model, even where the model feeds its "
             "outputs back as inputs"))


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
