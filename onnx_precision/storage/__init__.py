"""Storage: reading external weights in chunks, casting them lazily, and writing models atomically.

- :mod:`.external_data`: tensors whose data lives outside the proto (checking, chunked reads,
  value ranges, lazy casts).
- :mod:`.saving`: atomic, streamed writes of a model and its data file, and of text outputs.
- :mod:`.light_load`: a big single-file model loaded without its weights (read from the file).
- :mod:`.fast_cast`: float32 -> float16 through onnxruntime where numpy is slow.
"""

from __future__ import annotations

from .external_data import (
    cast_initializer,
    check_model_external_data,
    element_count,
    external_files,
    external_location,
    inline_small_external,
    is_external,
    model_tensors,
    read_array,
    value_range,
)
from .light_load import load_light, point_into_model_file
from .saving import (
    Outputs,
    atomic_write,
    check_output_path,
    data_location,
    fits_one_proto,
    inline_copy,
    save_model,
    write_files,
    write_text,
)

__all__ = ["element_count", "cast_initializer", "check_model_external_data", "external_files",
           "external_location",
           "inline_small_external",
           "is_external", "model_tensors", "read_array", "value_range", "atomic_write", "check_output_path",
           "data_location", "fits_one_proto", "inline_copy", "save_model", "write_files", "write_text",
           "Outputs", "load_light",
           "point_into_model_file"]
