"""Which generation a model runs, told from the names it was exported with, or from the
``genai_config.json`` onnxruntime-genai keeps beside it, with the user's options over them.

The conventions (each feedback pair also needs the same element type and rank on both ends, and the
same size wherever both declare one):

* a KV cache: an output with ``present`` in its name feeds the input named with ``past_key_values``
  or ``past`` in its place (optimum's ``present.0.key`` -> ``past_key_values.0.key``, optimum's
  older ``present_key_values.0.value``, genai's ``present_key_self_0`` -> ``past_key_self_0``);
* a recurrent state: an output named as an input with ``N``/``n``/``_out``/``_next``/``_new`` after it
  or ``new_``/``next_`` before it feeds that input, itself or with ``0``/``_in`` after it (Silero VAD's
  ``stateN`` -> ``state``, ``hn`` -> ``h0``, ``cN`` -> ``c``, ``state_out`` -> ``state_in``), where the
  name is a recurrent one (``h``, ``c``, ``hx``, ``cx``, or holding ``state``, ``hidden``, ``cell``,
  ``memory``, ``carry``): a denoiser's ``x_in`` -> ``x_out`` or a normaliser's ``x`` -> ``xn`` has the
  same form and type, and feeding it back would judge a model no one runs that way;
* greedy tokens: an integer ``input_ids`` (or ``decoder_input_ids``) and a float ``logits``;
* what grows: ``attention_mask``, ``position_ids``, ``cache_position``;
* a streaming model (states, no tokens): its first other float input is its signal, chunked by its
  declared last dimension (or ``--chunk``), with every float input of that size or an undeclared one.

A model with no output fed back is not a generation: :func:`infer_generation` returns None.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import onnx

from .. import user_files
from ..errors import UsageError
from ..float_types import LOW_TYPES
from ..options import GenerationOptions
from .description import Chunking, Dim, Feedback, FeedbackKind, Generation, InputSpec, Tokens

GENAI_CONFIG = "genai_config.json"
# the config a user names, and the one found beside the model (its problems name no option)
GENAI_FILE = user_files.FileKind("--genai-config", GENAI_CONFIG, 16 << 20, UsageError)
GENAI_BESIDE = user_files.FileKind("", GENAI_CONFIG, 16 << 20, UsageError)

_TOKEN_INPUTS = ("input_ids", "decoder_input_ids")
_STATE_SUFFIXES = ("_out", ".out", "_next", "_new", "_n", "N", "n")
_STATE_PREFIXES = ("new_", "next_")
_STATE_INPUT_SUFFIXES = ("", "0", "_0", "_in", ".in")
_STATE_NAMES = ("h", "c", "hx", "cx")
_STATE_WORDS = ("state", "hidden", "cell", "memory", "carry")


def infer_generation(model: onnx.ModelProto, options: GenerationOptions | None = None,
                     model_path: str = "") -> Generation | None:
    """The generation ``model`` runs, or None when nothing it outputs feeds an input (or ``options``
    turn it off). ``model_path``: where the model was read from; the ``genai_config.json`` beside it
    describes it when the config names that file (``options.genai_config``: the config to read,
    whatever file it names)."""
    options = options or GenerationOptions()
    if options.off:
        return None
    io = _Io(model)
    beside = None if options.genai_config else _beside(model_path)
    config_path = options.genai_config or beside
    genai = None
    if config_path:
        config = user_files.read_json(config_path, GENAI_BESIDE if beside else GENAI_FILE)
        genai = _from_genai(io, config, config_path, model_path if beside else "")
    if genai is not None:
        feedback, tokens, named, max_length, source = genai
    else:
        feedback, tokens, named = _from_names(io), _tokens(io), _grown(io)
        max_length, source = None, "optimum names" if any(f.kind == "kv" for f in feedback) else "state names"
    if options.feedback:
        source = f"{source} and --feedback" if feedback else "--feedback"
        feedback = _overridden(io, feedback, options.feedback)
    if not feedback:
        return None
    cache = next((f for f in feedback if f.kind == "kv"), None)
    if tokens is None and cache is not None:
        raise UsageError(f"{model_path or 'the model'}: it feeds a KV cache back ('{cache.output}' -> "
                         f"'{cache.input}') but has no integer 'input_ids' and float 'logits' to decode "
                         f"greedily; --no-generation judges one forward pass instead")
    fed = {f.input for f in feedback}
    chunking = None
    if tokens is None:
        chunking = _chunking(io, fed | set(named.values()), options.chunk)
    elif options.chunk is not None:
        raise UsageError(f"--chunk {options.chunk}: the model is a decoder (it is fed its tokens), not a "
                         f"streaming model")
    return Generation(tuple(feedback), io.specs, tokens, named.get("attention_mask"),
                      named.get("position_ids"), named.get("cache_position"), chunking,
                      options.steps,
                      options.max_length if options.max_length is not None else max_length, source)


def _beside(model_path: str) -> str | None:
    """The ``genai_config.json`` beside the model file, when there is one."""
    if not model_path:
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(model_path)), GENAI_CONFIG)
    return path if os.path.isfile(path) else None


class _Io:
    """A model's graph inputs (initializers left out) and outputs, with their declared types."""

    def __init__(self, model: onnx.ModelProto) -> None:
        inits = {i.name for i in model.graph.initializer}
        self.inputs = {vi.name: vi.type for vi in model.graph.input if vi.name not in inits}
        self.outputs = {vi.name: vi.type for vi in model.graph.output}
        self.specs = tuple(InputSpec(name, _dtype(tp), _shape(tp)) for name, tp in self.inputs.items())

    def elem(self, name: str) -> int:
        tp = self.inputs.get(name) or self.outputs.get(name)
        return tp.tensor_type.elem_type if tp is not None and tp.HasField("tensor_type") else 0

    def shape(self, name: str) -> tuple[Dim, ...] | None:
        tp = self.inputs.get(name) or self.outputs.get(name)
        return None if tp is None else _shape(tp)

    def fits(self, output: str, input: str) -> bool:
        """Whether ``output`` can be fed as ``input``: the same element type and rank, and the same
        size wherever both declare one."""
        if self.elem(output) != self.elem(input) or not self.elem(output):
            return False
        a, b = self.shape(output), self.shape(input)
        if a is None or b is None:
            return True
        return len(a) == len(b) and all(not (isinstance(x, int) and isinstance(y, int)) or x == y
                                        for x, y in zip(a, b))

    def kind(self, output: str, input: str) -> FeedbackKind:
        """``kv`` where an axis is named differently in and out (it grows: ``past_sequence_length`` in,
        ``total_sequence_length`` out), ``state`` otherwise."""
        a, b = self.shape(output) or (), self.shape(input) or ()
        return "kv" if any(isinstance(x, str) and x != y for x, y in zip(a, b)) else "state"


def _dtype(tp: onnx.TypeProto) -> str:
    """numpy's name of the element type ("" where none is declared, or it is no ONNX type: the sample
    loader says so, naming the input)."""
    elem = tp.tensor_type.elem_type if tp.HasField("tensor_type") else 0
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else ""
    except KeyError:
        return ""


def _shape(tp: onnx.TypeProto) -> tuple[Dim, ...] | None:
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in tp.tensor_type.shape.dim)


def _is_int(elem: int) -> bool:
    return elem in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)


def _is_float(elem: int) -> bool:
    return elem in LOW_TYPES or elem in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)


# --- by names ---------------------------------------------------------------------------------------

def _from_names(io: _Io) -> list[Feedback]:
    feedback: list[Feedback] = []
    taken: set[str] = set()
    for output in io.outputs:
        kv = "present" in output
        for candidate in (_kv_inputs(output) if kv else _state_inputs(output)):
            if candidate in io.inputs and candidate not in taken and io.fits(output, candidate):
                feedback.append(Feedback(output, candidate, "kv" if kv else "state"))
                taken.add(candidate)
                break
    return feedback


def _kv_inputs(output: str) -> list[str]:
    """The names a cache output's input may have."""
    names = []
    if output.startswith("present_key_values"):
        names.append("past_key_values" + output[len("present_key_values"):])
    return names + [output.replace("present", "past_key_values", 1), output.replace("present", "past", 1)]


def _state_inputs(output: str) -> list[str]:
    """The names a recurrent state output's input may have."""
    stems = [output[:-len(s)] for s in _STATE_SUFFIXES if output.endswith(s) and len(output) > len(s)]
    stems += [output[len(p):] for p in _STATE_PREFIXES if output.startswith(p) and len(output) > len(p)]
    return [stem + s for stem in stems if _recurrent(stem) for s in _STATE_INPUT_SUFFIXES]


def _recurrent(stem: str) -> bool:
    """Whether ``stem`` names a recurrent state (``h``, ``conv_state``, ``hidden_1``)."""
    lower = stem.lower()
    return lower in _STATE_NAMES or any(word in lower for word in _STATE_WORDS)


def _tokens(io: _Io) -> Tokens | None:
    ids = next((n for n in _TOKEN_INPUTS if n in io.inputs and _is_int(io.elem(n))), None)
    if ids is None or "logits" not in io.outputs or not _is_float(io.elem("logits")):
        return None
    return Tokens("logits", ids)


def _grown(io: _Io) -> dict[str, str]:
    """The inputs that grow each step, by their role."""
    return {n: n for n in ("attention_mask", "position_ids", "cache_position") if n in io.inputs}


def _chunking(io: _Io, taken: set[str], chunk: int | None) -> Chunking | None:
    """A streaming model's signal: its float inputs not fed back whose last dimension is the chunk's
    (``chunk``, or the first one's declared size) or undeclared; its other inputs are fed whole."""
    floats = [n for n in io.inputs if n not in taken and _is_float(io.elem(n)) and io.shape(n) != ()]
    if not floats:
        if chunk is not None:
            raise UsageError(f"--chunk {chunk}: the model has no input to chunk (a float input not fed back)")
        return None
    lasts = {n: (io.shape(n) or (None,))[-1] for n in floats}
    if chunk is None:
        first = lasts[floats[0]]
        chunk = first if isinstance(first, int) and first > 0 else None
    chunked = tuple(n for n in floats if lasts[n] == chunk or not isinstance(lasts[n], int))
    if not chunked:
        raise UsageError(f"--chunk {chunk}: the model's signal '{floats[0]}' takes {lasts[floats[0]]} "
                         f"elements a step (its declared last dimension)")
    return Chunking(chunked, chunk)


# --- by a genai_config.json -------------------------------------------------------------------------

_GENAI_CACHES = (("past_key_names", "present_key_names"), ("past_value_names", "present_value_names"))
_Described = tuple[list[Feedback], Tokens | None, dict[str, str], int | None, str]


def _from_genai(io: _Io, config: object, path: str, model_path: str) -> _Described | None:
    """The generation ``path`` describes for the model, or None when it names another file than
    ``model_path`` (a config beside a Whisper encoder is its decoder's); "": whatever file it names."""
    root = _object(config, "", path)
    decoder = _object(_object(root.get("model"), "model", path).get("decoder"), "model.decoder", path)
    filename = decoder.get("filename")
    if model_path and isinstance(filename, str) and filename != os.path.basename(model_path):
        return None
    inputs = _object(decoder.get("inputs", {}), "model.decoder.inputs", path)
    outputs = _object(decoder.get("outputs", {}), "model.decoder.outputs", path)
    layers = decoder.get("num_hidden_layers", 0)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 0:
        raise UsageError(f"{path}: model.decoder.num_hidden_layers is {layers!r}, not a count of layers")
    feedback = []
    for past, present in _GENAI_CACHES:
        if past in inputs and present in outputs:
            past_t, present_t = _text(inputs, past, path), _text(outputs, present, path)
            for i in range(layers):
                pair = present_t.replace("%d", str(i)), past_t.replace("%d", str(i))
                for name, role in zip(pair, ("output", "input")):
                    if name not in (io.outputs if role == "output" else io.inputs):
                        raise UsageError(f"{path}: names {role} '{name}' (layer {i} of {layers}), which the "
                                         f"model does not have")
                feedback.append(Feedback(*pair, "kv"))
    feedback.sort(key=lambda f: list(io.outputs).index(f.output))
    ids, logits = inputs.get("input_ids"), outputs.get("logits")
    tokens = None
    if isinstance(ids, str) and isinstance(logits, str) and ids in io.inputs and logits in io.outputs:
        tokens = Tokens(logits, ids)
    named = {role: tensor for role in ("attention_mask", "position_ids")
             if isinstance(tensor := inputs.get(role), str) and tensor in io.inputs}
    max_length = _object(root.get("search", {}), "search", path).get("max_length")
    if max_length is not None and (not isinstance(max_length, int) or isinstance(max_length, bool)
                                   or max_length < 1):
        raise UsageError(f"{path}: search.max_length is {max_length!r}, not a length")
    return feedback, tokens, named, max_length, GENAI_CONFIG


def _object(value: object, where: str, path: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise UsageError(f"{path}: {where or 'the file'} is not an object (expected onnxruntime-genai's "
                         f"genai_config.json)")
    return value


def _text(obj: Mapping, key: str, path: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise UsageError(f"{path}: '{key}' is {value!r}, not a tensor name")
    return value


# --- the user's pairs -------------------------------------------------------------------------------

def split_pair(pair: str, outputs: Sequence[str], inputs: Sequence[str]) -> tuple[str, str]:
    """``OUT=IN`` as (output, input) of the model, at the ``=`` that makes both names it has (a
    tensor name may hold a ``=``); else the one-line error naming what it lacks."""
    cuts = [i for i, c in enumerate(pair) if c == "="]
    for cut in cuts:
        out, into = pair[:cut], pair[cut + 1:]
        if out in outputs and into in inputs:
            return out, into
    out, into = pair[:cuts[0]], pair[cuts[0] + 1:]
    if out not in outputs:
        raise UsageError(f"--feedback {pair}: the model has no output '{out}' "
                         f"(outputs: {', '.join(outputs)})")
    raise UsageError(f"--feedback {pair}: the model has no input '{into}' (inputs: {', '.join(inputs)})")


def _overridden(io: _Io, feedback: list[Feedback], pairs: Sequence[str]) -> list[Feedback]:
    """``feedback`` with each user pair in place of the inferred pair of its output or input."""
    out = list(feedback)
    for pair in pairs:
        output, into = split_pair(pair, list(io.outputs), list(io.inputs))
        if not io.fits(output, into):
            raise UsageError(f"--feedback {pair}: output '{output}' ({_type_text(io, output)}) cannot be fed "
                             f"as input '{into}' ({_type_text(io, into)})")
        out = [f for f in out if f.output != output and f.input != into]
        out.append(Feedback(output, into, io.kind(output, into)))
    return out


def _type_text(io: _Io, name: str) -> str:
    elem = io.elem(name)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem) if elem else "no type"
    shape = io.shape(name)
    return f"{dtype}{list(shape) if shape is not None else ''}"
