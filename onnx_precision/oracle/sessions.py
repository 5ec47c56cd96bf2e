"""onnxruntime sessions as the oracle builds them: options, weights by reference, custom-op
libraries, feeds and fetches, and onnxruntime's messages made one line.

External data is read relative to the model's own directory, whatever the working directory;
large weights reach a session by reference (:mod:`.weights`), never inside the serialized model.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from .. import cancel
from ..errors import ModelLoadError
from ..storage import external_location, inline_small_external, model_tensors
from .weights import by_reference, weighted_session

Feed = Mapping[str, np.ndarray]


def session_options(threads: int | None = None, arena: bool = True) -> ort.SessionOptions:
    """The oracle's session options; ``threads`` caps onnxruntime's intra-op threads (None: all).
    ``arena``: onnxruntime's CPU memory arena, which keeps the largest run's memory for the next; a
    session run once per sample and dropped goes without it (the twin graph of the 26 MB dynamic-quant
    model of scripts/bench_quantized.py, fetching 74 MB per run: 11 MB less at its peak, the same
    outputs)."""
    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = arena
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # Prepacking copies every constant weight into a kernel layout, also those of If branches,
    # while the FP16 branches still read the original: the weights would be held twice (measured
    # on the 2.2 GB MatMul chain: 4.3 GB peak with it, 2.4 GB without, same run time).
    options.add_session_config_entry("session.disable_prepacking", "1")
    # Fatal only: a failing run is raised as an exception, which says the same (see .blame), and a
    # user mistake must stay one line on stderr.
    options.log_severity_level = 4
    if threads:
        options.intra_op_num_threads = threads
    return options


@dataclass(frozen=True)
class Io:
    """What a run of a model feeds and fetches: its inputs' types (:func:`input_dtypes`), its outputs."""

    dtypes: Mapping[str, np.dtype]
    outputs: tuple[str, ...]

    @classmethod
    def of(cls, model: onnx.ModelProto) -> Io:
        return cls(input_dtypes(model), tuple(o.name for o in model.graph.output))


@dataclass(frozen=True)
class Handed:
    """A model as a session is handed it (:func:`handed`): its bytes, with its large weights as stubs
    and their values by reference (:func:`.weights.by_reference`), and its :class:`Io`. Its caller
    can drop the model's proto before onnxruntime parses the bytes, and the bytes once the session is
    built: on the 26 MB dynamic-quant model of scripts/bench_quantized.py, a proto alive beside
    onnxruntime's copy of it was 25-35 MB of the run's peak."""

    serialized: bytes
    values: Mapping[str, np.ndarray]
    io: Io


def handed(model: onnx.ModelProto, base_dir: str, shared: MutableMapping | None = None) -> Handed:
    """``model`` as :func:`make_session` hands it to onnxruntime (external data read under ``base_dir``;
    ``shared``: see :func:`.weights.by_reference`)."""
    light, values = by_reference(model, base_dir, shared)
    if any(external_location(t) is not None for t in model_tensors(light)):
        if light is model:
            light = onnx.ModelProto()
            light.CopyFrom(model)  # cheap: external weights are not in the proto
        inline_small_external(light, base_dir)
    return Handed(light.SerializeToString(), values, Io.of(model))


def make_session(model: onnx.ModelProto | Handed, base_dir: str,
                 providers: Sequence[str] = ("CPUExecutionProvider",),
                 options: ort.SessionOptions | None = None,
                 custom_op_libraries: Sequence[str] = (), shared: MutableMapping | None = None,
                 ) -> ort.InferenceSession:
    """An onnxruntime session of an in-memory model (or of one :func:`handed` already) whose external
    data (if any) is under base_dir, with the kernels of ``custom_op_libraries`` registered (a model
    context's, see :attr:`ModelContext.custom_op_libraries`)."""
    options = options or session_options(arena=False)  # the default is for a session run once per sample
    register_libraries(options, custom_op_libraries)
    options.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                     os.path.abspath(base_dir))
    given = model if isinstance(model, Handed) else handed(model, base_dir, shared)
    return weighted_session(given.serialized, options, list(providers), given.values)


def register_libraries(options: ort.SessionOptions, libraries: Sequence[str]) -> None:
    """Register each custom-op library on ``options``; one onnxruntime refuses is the user's mistake."""
    for library in libraries:
        try:
            options.register_custom_ops_library(os.path.abspath(library))
        except Exception as e:  # onnxruntime's own exception types: the library cannot be loaded
            raise ModelLoadError(f"--ort-custom-op-library {library}: onnxruntime cannot load it: "
                                 f"{ort_message(e)}") from e


def ort_message(e: BaseException) -> str:
    """The first line of an onnxruntime error, without its error-code and source-location prefixes."""
    return ort_text(str(e)) or type(e).__name__


def ort_text(text: str) -> str:
    """The first line of an onnxruntime message, without its error-code and source-location prefixes."""
    text = text.strip()
    line = text.splitlines()[0] if text else ""
    line = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    return re.sub(r"^\S+\.(?:cc|h|cpp):\d+ \S+?\(.*?\) (?=\S)", "", line)


def input_dtypes(model: onnx.ModelProto) -> dict[str, np.dtype]:
    inits = {i.name for i in model.graph.initializer}
    return {vi.name: onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            for vi in model.graph.input if vi.name not in inits and vi.type.tensor_type.elem_type}


def cast_feed(feed: Feed, dtypes: Mapping[str, np.dtype]) -> dict[str, np.ndarray]:
    return {k: (np.asarray(v, dtype=dtypes[k]) if k in dtypes else v) for k, v in feed.items()}


def owned(value: np.ndarray) -> np.ndarray:
    """A copy of a value onnxruntime returned, to be kept after its session: the array it returns
    may live in the session's memory arena and keep all of it (measured on the decoder at seq
    1024: a 0.12 GB output held 0.8 GB after its session was gone)."""
    return np.array(value, copy=True)


def run_session(session: ort.InferenceSession, model: onnx.ModelProto | Io, feeds: Sequence[Feed]
                 ) -> tuple[dict[str, np.ndarray], ...]:
    """The graph outputs per feed, owned by the caller (they outlive the session)."""
    io = model if isinstance(model, Io) else Io.of(model)
    dtypes, names = io.dtypes, list(io.outputs)
    return tuple({n: owned(v) for n, v in zip(names, cancel.run(session, names, cast_feed(f, dtypes)))}
                 for f in feeds)
