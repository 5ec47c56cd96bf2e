"""Converting without files: a ModelProto (or a path) and feeds in, the converted ModelProto, its plan
and its report out; writing is a separate, explicit step (:meth:`ConvertedModel.save`).

:func:`convert_model` runs what ``onnx-precision convert`` runs (:func:`.run.conversion`, its output
kept in memory), with the same options, up to the file: the plan is chosen the same way and the
rewritten model is verified as the CLI verifies the file it writes (onnx's full check, the emulation,
``--oracle``'s provider, held-out samples, the load at onnxruntime's default options in a child, the
FP32 pins that make it load), but in memory; :meth:`ConvertedModel.save` then writes the bytes the CLI
writes for the same options, atomically.

Weights stay where they are. A model given by path is loaded as the CLI loads it (external data left
on disk, a large single file memory-mapped), so a model over 2 GB converts as it does there: the
conversion keeps the weights in the input's files, each converted as ``save`` streams it, and only
:attr:`ConvertedModel.model` reads them into a proto (refused over 2 GB). A ModelProto whose tensors
keep their data in files needs ``base_dir``, the directory those files are relative to
(:func:`onnx_precision.context.in_memory_context`). The load at onnxruntime's default options is
checked for a converted model that holds its weights; for one whose weights are still in files a
warning says it was not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, partial
from typing import TYPE_CHECKING, Union

import numpy as np
import onnx

from .. import storage
from ..context import ModelContext, Upgrade, in_memory_context, load_model
from ..data import SampleSpec, in_memory_spec
from ..errors import SearchError, UsageError
from ..plan import PrecisionPlan
from ..rewriter import RewriteResult
from ..target import Target
from ..vocab import MODES, Status
from . import run

if TYPE_CHECKING:
    from ..report import RunReport
    from .choose import AutoResult, Progress

Path = Union[str, "os.PathLike[str]"]
# One feed (input name -> array), a list of them, a file of them (as --inputs reads), or a SampleSpec.
SampleInput = Union[SampleSpec, Mapping[str, np.ndarray], Sequence[Mapping[str, np.ndarray]], Path, None]

# The report's output until the model is saved (a report without one says no model was made).
CONVERTED = "<converted in memory>"

# Options that name files the CLI writes: an in-memory conversion writes none.
_FILE_OPTIONS = {"plan_out": "write result.plan.dumps()",
                 "report_json": "report.write_json(result.report, path)",
                 "report_md": "report.write_markdown(result.report, path)",
                 "trt_flags_path": "the CLI writes it", "save_inputs": "the CLI writes them",
                 "save_outputs": "the CLI writes them"}


@dataclass(frozen=True)
class ConvertedModel:
    """A conversion done in memory: the converted model, its plan, what verified it, and how to
    write it (:meth:`save`)."""

    plan: PrecisionPlan  # the plan written into the model, resolved
    rewrite: RewriteResult  # its model keeps the weights the input kept in files there (save reads them)
    source: str  # the input's path, or IN_MEMORY
    base_dir: str  # the directory the weights still in files are read from
    report: RunReport | None = None  # static/auto modes; None in all-fp16 mode (nothing is run)
    auto: AutoResult | None = None  # static/auto modes: the search's result
    warnings: tuple[str, ...] = ()
    external_data: bool | None = None  # save's default layout (ConvertOptions.external_data)
    inputs: tuple[str, ...] = ()  # the files the conversion read (:func:`_inputs`): save overwrites none

    @cached_property
    def model(self) -> onnx.ModelProto:
        """The converted model holding all its weights, for ``onnx.save`` or
        ``onnxruntime.InferenceSession(model.SerializeToString())``: weights the input kept in files
        are read (and converted) on first use. Over protobuf's 2 GB limit no ModelProto can hold it:
        a UsageError says to :meth:`save` it (which streams the weights)."""
        converted = self.rewrite.model
        if not storage.fits_one_proto(converted, self.base_dir):
            raise UsageError(f"{self.source}: the converted model is over 2 GB with its weights, more than a "
                             f"ModelProto holds; result.save(path) writes it (weights in path.data)")
        return storage.inline_copy(converted, self.base_dir)

    @property
    def status(self) -> Status | str:
        """The report's status (``passed``, ``failed``, ``ort-load-failed``, ...), or
        ``not verified`` in all-fp16 mode."""
        return self.report.status if self.report is not None else "not verified"

    @property
    def passed(self) -> bool:
        """Whether the converted model passed every check (False when nothing checked it)."""
        return self.report is not None and self.report.status == "passed"

    @property
    def all_warnings(self) -> tuple[str, ...]:
        """Every warning of the run once (the report's include the sample data's)."""
        return tuple(dict.fromkeys(self.warnings + (self.report.warnings if self.report else ())))

    def save(self, path: Path, *, external_data: bool | None = None) -> str:
        """Write the model to ``path`` atomically (staged beside it, moved into place whole, nothing
        left on failure), as ``onnx-precision convert -o path`` writes it; returns the absolute path.

        ``external_data``: True writes the weights to ``<file name>.data`` beside it, False one file
        unless over 2 GB, None (default: what the options said, else the input's layout) keeps
        external what was external and goes external over 2 GB. The weights the input kept in files
        are streamed from there, never held whole; the input's files are never overwritten.
        """
        layout = self.external_data if external_data is None else external_data
        return storage.save_model(self.rewrite.model, os.fspath(path), source_dir=self.base_dir,
                                  external_data=layout, input_paths=self.inputs)


def convert_model(model: onnx.ModelProto | str | os.PathLike[str], samples: SampleInput = None,
                  options: run.ConvertOptions | None = None, *, base_dir: Path | None = None,
                  progress: Progress | None = None) -> ConvertedModel:
    """Convert ``model`` (a ModelProto, left unchanged, or a path) per ``options`` and return the
    converted model, its plan and its report; no file is written (:meth:`ConvertedModel.save` writes).

    ``samples``: one feed (input name -> array), a list of them, a file of them (as ``--inputs``
    reads), or a :class:`SampleSpec`; None takes ``options.samples`` (synthetic by default).
    ``base_dir``: the directory a ModelProto's external data is relative to. Options that name
    output files are refused (saying what to do instead). A search that finds no plan to write
    raises :class:`SearchError`, as the CLI exits 1; a converted model that fails a check is
    returned with ``passed`` False, as the CLI writes it and exits 1 (or 3).
    """
    checked = _checked_options(options)
    if base_dir is not None and not isinstance(base_dir, (str, os.PathLike)):
        raise UsageError(f"base_dir {base_dir!r}: expected the directory of the model's data files (a path)")
    options = replace(checked, samples=_sample_spec(samples, checked))
    inputs = _inputs(model, base_dir, options)
    if options.mode != "all-fp16":
        from .. import oracle

        oracle.require_oracle(options.oracle)
    done = run.conversion(partial(_context, model, base_dir, options), options, run.Destination(CONVERTED),
                          progress)
    if done.rewrite is None:
        raise SearchError(f"{done.unwritten} (nothing converted)")
    return ConvertedModel(done.rewrite.plan, done.rewrite, done.ctx.path, done.ctx.base_dir, done.report,
                          done.auto, done.warnings, True if options.output.external_data else None, inputs)


def _inputs(model: object, base_dir: Path | None, options: run.ConvertOptions) -> tuple[str, ...]:
    """The files a conversion of ``model`` reads (:func:`.run.input_paths`), a ModelProto's data files
    under ``base_dir`` in place of a model file and its own."""
    if isinstance(model, (str, os.PathLike)):
        return run.input_paths(os.fspath(model), options)
    own = (storage.external_files(model, os.path.abspath(base_dir))
           if isinstance(model, onnx.ModelProto) and base_dir is not None else ())
    return own + run.input_paths(None, options)


def _checked_options(options: object) -> run.ConvertOptions:
    """``options`` (default: the defaults), refused with a one-line UsageError when it is not a
    ConvertOptions, asks for a mode that does not exist, or names a file to write."""
    if options is None:
        return run.ConvertOptions()
    options = run.require_options(options)
    if options.mode not in MODES:
        raise UsageError(f"options: mode {options.mode!r} is not one of {', '.join(MODES)}")
    named = [name for name in _FILE_OPTIONS if getattr(options.output, name)]
    if named:
        raise UsageError(f"options.{named[0]}: convert_model writes no file ({_FILE_OPTIONS[named[0]]}; "
                         f"result.save(path) writes the model)")
    return options


def _sample_spec(samples: object, options: run.ConvertOptions) -> SampleSpec:
    if samples is None:
        return options.samples
    if isinstance(samples, SampleSpec):
        return samples
    if isinstance(samples, (str, os.PathLike)):
        return replace(options.samples, inputs=os.fspath(samples), feeds=())
    return in_memory_spec(samples, options.samples)


def _context(model: object, base_dir: Path | None, options: run.ConvertOptions, target: Target,
             upgrade: Upgrade | None) -> ModelContext:
    """The model's context for ``target``, its opset raised by ``upgrade`` (None: as given): a path
    loaded as the CLI loads it, a ModelProto checked as a file is."""
    if isinstance(model, (str, os.PathLike)):
        if base_dir is not None:
            raise UsageError("base_dir: only for a ModelProto (a model file's external data is relative to "
                             "the file's own directory)")
        return load_model(os.fspath(model), options.targeting.custom_op_libraries, target, upgrade)
    if not isinstance(model, onnx.ModelProto):
        raise UsageError(f"model: expected an onnx.ModelProto or the path of an .onnx file; got "
                         f"{type(model).__name__}")
    directory = None if base_dir is None else os.fspath(base_dir)
    return in_memory_context(model, directory, options.targeting.custom_op_libraries, target, upgrade)
