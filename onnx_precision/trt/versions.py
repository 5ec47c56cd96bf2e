"""TensorRT versions and the ranges of them that an importer variant or a flag applies to.

onnx-tensorrt changes how it imports some ops between releases (CumSum became one layer in 10.8,
LayerNormalization's layer got a name in 10.1), so every fact in :mod:`.layers` is tied to a
:class:`VersionRange`. :data:`RELEASES` lists the releases that ship trtexec's weakly typed
flags, so flags can be computed per release and releases with the same flags grouped.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering


@total_ordering
@dataclass(frozen=True)
class TrtVersion:
    """A TensorRT release, major.minor (patch releases do not change the ONNX importers)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> TrtVersion:
        """``"10.8"`` (or ``"10.8.0.43"``, extra fields ignored) as a version."""
        parts = text.strip().split(".")
        try:
            return cls(int(parts[0]), int(parts[1]) if len(parts) > 1 else 0)
        except ValueError:
            raise ValueError(f"not a TensorRT version: {text!r} (expected MAJOR.MINOR, e.g. 10.8)") from None

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, TrtVersion):
            return NotImplemented
        return (self.major, self.minor) < (other.major, other.minor)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@dataclass(frozen=True)
class VersionRange:
    """Releases ``first`` to ``last`` inclusive; ``last`` None means every later release too."""

    first: TrtVersion
    last: TrtVersion | None = None

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, TrtVersion):
            return False
        return self.first <= version and (self.last is None or version <= self.last)

    def __str__(self) -> str:
        if self.last is None:
            return f"{self.first}+"
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


def since(text: str) -> VersionRange:
    return VersionRange(TrtVersion.parse(text))


def between(first: str, last: str) -> VersionRange:
    return VersionRange(TrtVersion.parse(first), TrtVersion.parse(last))


V = TrtVersion.parse

# Releases whose trtexec has --layerPrecisions/--layerOutputTypes (deprecated in 10.12, removed in 11.0).
# 9.x were the LLM-only releases; they share 8.6's importers for every op in the table.
RELEASES: tuple[TrtVersion, ...] = tuple(V(v) for v in (
    "8.6", "9.0", "9.1", "9.2", "9.3", "10.0", "10.1", "10.2", "10.3", "10.4", "10.5", "10.6", "10.7", "10.8",
    "10.9", "10.10", "10.11"))
LAST_WEAKLY_TYPED = V("10.11")
# The newest importer source read for the op table (onnx-tensorrt 10.15, the release with RMSNormalization).
NEWEST = V("10.15")
# trtexec (TensorRT OSS samples/common, read at v8.6.1, v9.1.0, release/10.0 and 10.11): 8.6.1 knows the
# types fp32, fp16, int8, fp8 and int32 only, so int64, bool and uint8 in --layerOutputTypes or
# --input/outputIOFormats are errors, and it matches --layerPrecisions/--layerOutputTypes names exactly
# (or "*" for every layer); 9.1 adds int64, bool, uint8, bf16 and names with one '*' wildcard
# (findPlausible/matchStringWithOneWildcard). There is no 9.0 tag to read: 9.0 is taken as 8.6.
OUTPUT_TYPES_INT64_BOOL = since("9.1")
TRTEXEC_PATTERNS = since("9.1")
# The releases whose trtexec has each 16-bit type's switch and its name in per-layer flags, by the
# precision a plan gives the type (trtexec spells it the same: --fp16, "fp16"). --fp16 is in every one;
# --bf16 and "bf16" from 9.1 as read above (sampleOptions.cpp, strToDT {"bf16", nvinfer1::DataType::kBF16});
# 9.0, taken as 8.6, gets none. A new 16-bit type is one more entry.
TRTEXEC_LOW_TYPES: dict[str, VersionRange] = {"fp16": since("8.6"), "bf16": since("9.1")}


def span_text(versions: list[TrtVersion]) -> str:
    """``"8.6 to 10.7"`` for consecutive releases (``"10.8"`` for one)."""
    if versions[0] == versions[-1]:
        return str(versions[0])
    return f"{versions[0]} to {versions[-1]}"
