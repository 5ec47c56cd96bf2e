"""The ``onnx-precision`` command line: parse arguments, call the library, pick an exit code.

Each subcommand lives in its own module with ``add_parser(subparsers)`` and ``run(args) -> int``.
A :class:`~onnx_precision.errors.PrecisionError` becomes one line on stderr and its exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from ..errors import PrecisionError
from . import analyze, check, convert
from .common import one_line


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line, like every other user error: the full usage is for --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="onnx-precision",
        description="Convert an FP32 ONNX model to a safe FP16 model and prove it.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (convert, analyze, check):
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # at any moment, parsing included: no traceback, no partial outputs
        print("onnx-precision: interrupted", file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed its one-line usage error
        return int(e.code or 0)
    verbosity = getattr(args, "verbose", 0) - getattr(args, "quiet", 0)
    logging.basicConfig(
        level=logging.WARNING if verbosity < 0 else logging.DEBUG if verbosity > 0 else logging.INFO,
        format="%(message)s", stream=sys.stderr, force=True)
    try:
        return int(args.run(args))
    except PrecisionError as e:
        print(f"onnx-precision: error: {one_line(str(e))}", file=sys.stderr)
        return e.exit_code

