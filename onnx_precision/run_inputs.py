"""The files a run reads: the one list of paths none of its outputs may overwrite.

``convert``, ``check``, ``analyze`` and the Python API each build it once, with
:func:`protected_paths`, before anything is staged, and hand it to :class:`~.storage.Outputs`, which
checks every output against it (the model, its data file, each side output). It holds the model and
every external data file the model names (its subgraphs' and functions' too), the FP32 reference model
and its data, the plan, the layer-precisions file, the custom-op libraries, and every file of the
sample and validation data (each .npz of a directory). Without the data files, ``--save-plan w.bin``
replaced the model's weights in ``w.bin`` with JSON.

A model's data files are found by reading the model file (its weights left on disk). A model that
cannot be read protects its own path alone: its load says what is wrong with it, after the outputs
are checked as they always were.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from . import storage
from .context import read_model_file
from .data import SampleSpec, sample_files
from .errors import OutputError, PrecisionError


def protected_paths(models: Iterable[str | None] = (), files: Iterable[str | None] = (),
                    samples: Iterable[str | None] = ()) -> tuple[str, ...]:
    """Every file a run reads, each once: each of ``models`` and the data files it names
    (:func:`model_files`), each of ``files`` (a plan, a layer-precisions file, a custom-op library),
    and each file of ``samples`` (what ``--inputs`` or ``--validation-inputs`` names: an .npz, a
    Polygraphy JSON, or a directory of .npz). None stands for an option not given."""
    paths = [p for model in models if model for p in model_files(model)]
    paths += [f for f in files if f]
    paths += [p for data in samples if data for p in sample_files(SampleSpec(inputs=data))]
    return tuple(dict.fromkeys(paths))


def model_files(path: str) -> tuple[str, ...]:
    """``path`` and every external data file the model in it names, beside the file it links to (as
    the load reads them)."""
    try:
        model, _ = read_model_file(path, light_from=0)
    except PrecisionError:  # the load says why, once the outputs are checked
        return (path,)
    return (path,) + storage.external_files(model, os.path.dirname(os.path.realpath(path)))


def check_data_file(output_path: str, protected: tuple[str, ...]) -> None:
    """Refuse an ``output_path`` whose data file (``<output>.data``, :func:`storage.data_location`)
    is one of ``protected``: a run that writes the weights there would replace a file it reads. Checked
    before any work, whether or not the model is written with a data file."""
    data = os.path.join(os.path.dirname(os.path.abspath(output_path)), storage.data_location(output_path))
    for path in protected:
        if os.path.abspath(path) == data or (os.path.exists(path) and os.path.exists(data)
                                             and os.path.samefile(path, data)):
            raise OutputError(f"{output_path}: its weights would be written to '{data}', a file this run "
                              f"reads ({path}); choose another output")
