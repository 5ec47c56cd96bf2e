"""The commands a run suggests (the next step, the check of the written model, the flags file's check),
spelled from one value that holds what they must repeat of the run.

A suggested command must work when pasted: it carries the sample data's options (the same feeds),
the tolerance (the same verdict), the custom op libraries (the same sessions) and the target's options,
and every argument goes through :func:`.render.for_shell`, so a path or name holding spaces, ``;``,
quotes or newlines reaches the command as one argument, on one line, and runs nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .data import SampleSpec
from .judge import Tolerance
from .native_oracles import CUDA, NATIVE_ORACLES, NativeOracle
from .options import GenerationOptions, Judging
from .render import for_shell


def quoted(args: Iterable[str]) -> str:
    """``args`` as one shell command line, each argument quoted where the shell would split or read it."""
    return " ".join(for_shell(a) for a in args)


def dims_text(shape: Sequence[int], separator: str = "x") -> str:
    """``1x3x224x224`` (or with ``separator``)."""
    return separator.join(str(d) for d in shape)


@dataclass(frozen=True)
class RunArgs:
    """What the commands a run suggests repeat of it: the model read and the model written, the sample
    data's options, what the run judged by (:class:`.options.Judging`: the tolerance, a quantized model's
    reference and margin, each spelled by its group), the custom op libraries, the oracle, the shape
    profile given (``--trt-*-shapes``: input -> {"min"|"opt"|"max": shape}), the shapes of the feeds
    the run ran (input -> one shape per feed; None when it ran none) and how it ran a generation
    (:class:`.options.GenerationOptions`: the same steps judged)."""

    model_path: str
    output_path: str
    samples: SampleSpec = field(default_factory=SampleSpec)
    judging: Judging = field(default_factory=Judging)
    custom_op_libraries: tuple[str, ...] = ()
    oracle: str = "emulate"
    trt_profile: Mapping[str, Mapping[str, tuple[int, ...]]] = field(default_factory=dict)
    sample_shapes: Mapping[str, Sequence[tuple[int, ...]]] | None = None
    generation: GenerationOptions = field(default_factory=GenerationOptions)

    @property
    def tolerance(self) -> Tolerance:
        """The tolerance the run judged by, as given."""
        return self.judging.tolerance

    def sample_args(self) -> list[str]:
        """The options that give the same feeds: the data file, else the synthetic feeds' seed, shapes
        and ranges (feeds handed in memory have no spelling: the command then runs synthetic ones)."""
        spec = self.samples
        if spec.inputs:
            return ["--inputs", spec.inputs]
        args = ["--seed", str(spec.seed)] if spec.seed else []
        for name, shape in spec.input_shapes.items():
            args += ["--input-shape", f"{name}:{dims_text(shape)}"]
        for name, (lo, hi) in spec.input_ranges.items():
            args += ["--input-range", f"{name}:[{lo!r},{hi!r}]"]
        return args

    def shapes(self) -> Mapping[str, Sequence[tuple[int, ...]]]:
        """Each input's shapes as the run fed it: the feeds', else the synthetic shapes given."""
        if self.sample_shapes is not None:
            return self.sample_shapes
        return {name: [tuple(shape)] for name, shape in self.samples.input_shapes.items()}

    def check_args(self, target_args: Sequence[str], oracle: str = "emulate") -> list[str]:
        """``onnx-precision check`` of the written model against the model read, judged as the run judged
        it (``target_args``: the target's options, :meth:`.Commands.cli_args`), on ``oracle``."""
        libraries = [arg for path in self.custom_op_libraries for arg in ("--ort-custom-op-library", path)]
        return ["onnx-precision", "check", self.model_path, self.output_path, *self.sample_args(),
                *self.judging.cli_args(), *self.generation.cli_args(), *target_args, *libraries,
                *(["--oracle", oracle] if oracle != "emulate" else [])]

    @property
    def native_oracle(self) -> NativeOracle:
        """The oracle a check on the GPU runs the model on: the run's own, where onnxruntime-gpu has it,
        else CUDA."""
        return next((o for o in NATIVE_ORACLES if o.name == self.oracle and o.in_gpu_build), CUDA)
