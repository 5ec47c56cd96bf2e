"""Write every example model and its sample data into models/, byte-identically on each run.

    python -m models            # or: python models/generate.py
    python -m models --check    # exit 1 if a committed file differs from what the builders make

A single feed is written as ``<name>.npz``; several feeds as a directory ``<name>/`` holding
``sample_<i>.npz``. The .npz files are written with fixed zip timestamps (``np.savez`` stamps the
current time), so rebuilding changes nothing.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import zipfile

import numpy as np

if __package__ in (None, ""):  # run as a script: make ``models`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import BUILDERS, Example  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
_EPOCH = (1980, 1, 1, 0, 0, 0)


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz that np.load reads, with no timestamps or other run-dependent bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for key in sorted(arrays):
            payload = io.BytesIO()
            np.lib.format.write_array(payload, np.asanyarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            archive.writestr(info, payload.getvalue())
    return buffer.getvalue()


def files_of(example: Example) -> dict[str, bytes]:
    """Relative path -> content for one example."""
    out = {f"{example.name}.onnx": example.model.SerializeToString(deterministic=True)}
    if len(example.feeds) == 1:
        out[f"{example.name}.npz"] = npz_bytes(example.feeds[0])
    else:
        for i, feed in enumerate(example.feeds):
            out[os.path.join(example.name, f"sample_{i}.npz")] = npz_bytes(feed)
    return out


def model_path(name: str) -> str:
    return os.path.join(HERE, f"{name}.onnx")


def data_path(name: str) -> str:
    """The --inputs argument for an example: its .npz, or its directory of .npz."""
    single = os.path.join(HERE, f"{name}.npz")
    return single if os.path.exists(single) else os.path.join(HERE, name)


def write_all(directory: str = HERE) -> list[str]:
    written = []
    for name in sorted(BUILDERS):
        for rel, content in files_of(BUILDERS[name]()).items():
            path = os.path.join(directory, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(content)
            os.replace(tmp, path)
            written.append(path)
    return written


def stale(directory: str = HERE) -> list[str]:
    """Files whose content differs from what the builders produce now."""
    bad = []
    for name in sorted(BUILDERS):
        for rel, content in files_of(BUILDERS[name]()).items():
            path = os.path.join(directory, rel)
            if not os.path.exists(path) or open(path, "rb").read() != content:
                bad.append(path)
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
