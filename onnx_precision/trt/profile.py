"""The optimization profile of a TensorRT build: min, opt and max shapes for each dynamic input, given
(``--trt-min-shapes`` ...) or read off the samples, and the flags that spell it for trtexec and Polygraphy;
and what trtexec's ``name:value`` lists cannot carry in a name (:func:`unparseable`), which holds for its
shape flags and its per-layer flags alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import UsageError
from ..suggested import dims_text as _dims

# Characters trtexec's parsing of "name:value,name:value" lists cannot carry in a name (':' is fine:
# splitNameAndValue splits on the last one).
_UNPARSEABLE = {",": "trtexec splits the list on ','", "'": "trtexec reads ' as a quote around the name",
                "*": "trtexec reads * as a wildcard"}

PROFILE = ("min", "opt", "max")
_SAMPLED = {"min": "smallest", "opt": "most common", "max": "largest"}
# input -> {"min"|"opt"|"max": shape}: a profile as the user gives it (--trt-min-shapes ...)
GivenProfile = Mapping[str, Mapping[str, tuple[int, ...]]]
GIVE_PROFILE = "give the deployment's with --trt-min-shapes/--trt-opt-shapes/--trt-max-shapes"


@dataclass(frozen=True)
class ShapeProfile:
    """One optimization profile for the dynamic inputs: (input, (min, opt, max) shapes); ``from_samples``
    names the inputs whose range was taken from the samples rather than given."""

    inputs: tuple[tuple[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]], ...]
    problems: tuple[str, ...] = ()
    from_samples: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (input, which of min/opt/max) sampled

    def comment(self) -> list[str]:
        """Where the profile came from, for the flags file: given, or read off the samples (and what
        that means for the engine)."""
        if not self.inputs:
            return []
        sampled = dict(self.from_samples)
        parts = []
        for name, _ in self.inputs:
            taken = sampled.get(name, ())
            given = [w for w in PROFILE if w not in taken]
            text = f"'{name}' " + "; ".join(
                ([f"{', '.join(given)} as given"] if given else [])
                + ([", ".join(f"{w} the samples' {_SAMPLED[w]}" for w in taken)] if taken else []))
            parts.append(text)
        lines = [f"# Shape profile: {'; '.join(parts)}."]
        if any(w != "opt" for taken in sampled.values() for w in taken):
            lines.append(f"# An engine built on a range read off the samples rejects every shape outside it: "
                         f"{GIVE_PROFILE}.")
        return lines

    def sampled_range(self) -> str:
        """Where a dynamic input's min or max was read off the samples, what an engine built on it accepts,
        for the command that builds one: "" where every range was given."""
        sampled = dict(self.from_samples)
        ranges = [(name, lo, hi) for name, (lo, _, hi) in self.inputs
                  if any(w != "opt" for w in sampled.get(name, ()))]
        if not ranges:
            return ""
        alone = all(lo == hi for _, lo, hi in ranges)
        listed = ", ".join(f"'{name}' {_dims(lo)} alone: min = opt = max" if lo == hi else
                           f"'{name}' {_dims(lo)} to {_dims(hi)}" for name, lo, hi in ranges)
        return (f"its shape profile is the samples' ({listed}): an engine built on it rejects every "
                f"{'other shape' if alone else 'shape outside it'}: {GIVE_PROFILE}")

    def trtexec_args(self) -> list[str]:
        if not self.inputs:
            return []
        return [f"--{which}Shapes=" + ",".join(f"{name}:{_dims(shapes[i])}" for name, shapes in self.inputs)
                for i, which in enumerate(("min", "opt", "max"))]

    def polygraphy_args(self, *, run: bool = False) -> list[str]:
        # Polygraphy splits NAME:[D0,D1] on the last ':' and keeps the name whole, spaces included
        def listed(i: int) -> list[str]:
            return [f"{name}:[{_dims(s[i], ',')}]" for name, s in self.inputs]

        if not self.inputs:
            return []
        args = [arg for i, which in enumerate(PROFILE) for arg in (f"--trt-{which}-shapes", *listed(i))]
        return args + (["--input-shapes", *listed(1)] if run else [])


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The model's inputs that are not initializers (IR < 4 lists weights as inputs too)."""
    inits = {i.name for i in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _is_dynamic(vi: onnx.ValueInfoProto) -> bool:
    tt = vi.type.tensor_type
    return not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim)


def shape_profile(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[Sequence[int]]] | None,
                  given: GivenProfile | None = None) -> ShapeProfile:
    """min/opt/max shapes for the model's dynamic inputs: as ``given`` (checked by
    :func:`check_given_profile`), else from the shapes of the samples: min and max per dimension,
    opt the most common sample shape (the largest of equally common ones)."""
    inputs, problems, from_samples = [], [], []
    given = given or {}
    for vi in graph_inputs(model):
        if not _is_dynamic(vi):
            continue
        shapes = [tuple(int(d) for d in s) for s in (input_shapes or {}).get(vi.name, ())]
        own = given.get(vi.name, {})
        bad = unparseable(vi.name)
        if bad:
            problems.append(f"input '{vi.name}' cannot be named in trtexec's shape flags ({bad})")
            continue
        sampled: dict[str, tuple[int, ...]] = {}
        if shapes and len({len(s) for s in shapes}) == 1:
            counts = Counter(shapes)
            sampled = {"min": tuple(min(dims) for dims in zip(*shapes)),
                       "opt": max(counts, key=lambda s: (counts[s], int(np.prod(s, dtype=np.int64)), s)),
                       "max": tuple(max(dims) for dims in zip(*shapes))}
        lo, opt, hi = (own.get(which, sampled.get(which)) for which in PROFILE)
        if lo is not None and opt is not None and hi is not None:
            inputs.append((vi.name, (lo, opt, hi)))
            if len(own) < len(PROFILE):
                from_samples.append((vi.name, tuple(w for w in PROFILE if w not in own)))
            if len({len(lo), len(opt), len(hi)}) > 1 or any(
                    a > b for x, y in ((lo, opt), (opt, hi)) for a, b in zip(x, y)):
                problems.append(f"input '{vi.name}': min {_dims(lo)}, opt {_dims(opt)}, max {_dims(hi)} (the "
                                f"samples' and the given) do not grow: TensorRT refuses this profile")
        elif shapes and not sampled:
            ranks = sorted({len(s) for s in shapes})
            problems.append(f"input '{vi.name}': the samples have different ranks {ranks}")
        else:
            problems.append(f"input '{vi.name}' has dynamic dimensions and no sample shapes were given: "
                            f"add --minShapes/--optShapes/--maxShapes for it")
    return ShapeProfile(tuple(inputs), tuple(problems), tuple(from_samples))


def check_given_profile(model: onnx.ModelProto, given: GivenProfile) -> None:
    """Refuse a profile that names no dynamic input of ``model``, or whose min, opt and max disagree
    with the model's rank and fixed dimensions or do not grow min <= opt <= max."""
    inputs = {vi.name: vi for vi in graph_inputs(model)}
    for name, shapes in given.items():
        vi = inputs.get(name)
        if vi is None:
            raise UsageError(f"--trt-*-shapes {name}: the model has no input '{name}' (inputs: "
                             f"{', '.join(inputs) or 'none'})")
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        for which, shape in shapes.items():
            wrong = len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape))
            if vi.type.tensor_type.HasField("shape") and wrong:
                model_dims = "x".join(str(d) if d is not None else "?" for d in dims)
                raise UsageError(f"--trt-{which}-shapes {name}:{_dims(shape)}: the model's input is "
                                 f"{model_dims}")
        ordered = [shapes[w] for w in PROFILE if w in shapes]
        if any(any(a > b for a, b in zip(lo, hi)) for lo, hi in zip(ordered, ordered[1:])):
            listed = ", ".join(f"{w} {_dims(shapes[w])}" for w in PROFILE if w in shapes)
            raise UsageError(f"--trt-*-shapes {name}: {listed}: each must be <= the next")


def sample_shapes(feeds: Iterable[Mapping[str, np.ndarray]]) -> dict[str, list[tuple[int, ...]]]:
    """The shape of every input in every feed, for :func:`shape_profile`."""
    shapes: dict[str, list[tuple[int, ...]]] = {}
    for feed in feeds:
        for name, value in feed.items():
            shapes.setdefault(name, []).append(tuple(int(d) for d in np.shape(value)))
    return shapes


def unparseable(name: str) -> str:
    """Why trtexec's lists cannot name ``name`` ("" when they can)."""
    return next((f"its name contains {c!r}: {why}" for c, why in _UNPARSEABLE.items() if c in name), "")
