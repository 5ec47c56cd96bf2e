"""Write each decoder's directory under models/decoders/, byte-identically on each run.

    python -m models.decoders            # or: python models/decoders/generate.py
    python -m models.decoders --check    # exit 1 if a committed file differs from what the builders make

Each model is a directory as onnxruntime-genai lays one out: ``model.onnx``, its first step's feed
``prefill.npz`` (written as :func:`models.generate.npz_bytes` writes every sample: no timestamps), and
its extra files (the Llama's ``genai_config.json``).
"""

from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a script: make ``models`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from models.decoders import BUILDERS, EXTRA_FILES  # noqa: E402
from models.generate import npz_bytes  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def files_of(name: str) -> dict[str, bytes]:
    """Path relative to models/decoders/ -> content, for one decoder."""
    example = BUILDERS[name]()
    out = {os.path.join(name, "model.onnx"): example.model.SerializeToString(deterministic=True),
           os.path.join(name, "prefill.npz"): npz_bytes(example.feeds[0])}
    out.update({os.path.join(name, file): make() for file, make in EXTRA_FILES.get(name, {}).items()})
    return out


def model_path(name: str) -> str:
    return os.path.join(HERE, name, "model.onnx")


def prefill_path(name: str) -> str:
    return os.path.join(HERE, name, "prefill.npz")


def write_all(directory: str = HERE) -> list[str]:
    written = []
    for name in sorted(BUILDERS):
        for rel, content in files_of(name).items():
            path = os.path.join(directory, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "wb") as f:
                f.write(content)
            os.replace(path + ".tmp", path)
            written.append(path)
    return written


def stale(directory: str = HERE) -> list[str]:
    """Files whose content differs from what the builders produce now."""
    return [path for name in sorted(BUILDERS) for rel, content in files_of(name).items()
            if not os.path.exists(path := os.path.join(directory, rel)) or open(path, "rb").read() != content]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare the committed files")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        for path in bad:
            print(f"stale: {os.path.relpath(path)}")
        return 1 if bad else 0
    for path in write_all():
        print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
