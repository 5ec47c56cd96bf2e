"""The ``onnx-precision`` command line: parse arguments, call the library, pick an exit code.

Each subcommand lives in its own module with ``add_parser(subparsers)`` and ``run(args) -> int``.
This is the process boundary: a :class:`~onnx_precision.errors.PrecisionError` (every problem with
what the user handed in: the readers raise it themselves) becomes one line on stderr and its exit
code; running out of memory or an operating-system failure is one line, exit 1; anything else is a
bug, one line asking for a report, exit 1 (its traceback with -v). SIGTERM (``timeout``, a CI
cancellation, ``docker stop``), SIGHUP (a dropped ssh session) and SIGQUIT unwind as Ctrl-C does, so
staged outputs are discarded, and exit as a shell reports the signal (128 + its number). They stop
the run within a moment even inside onnxruntime (:class:`~onnx_precision.cancel.SignalStop`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from ..cancel import SignalStop
from ..errors import PrecisionError
from ..render import for_terminal
from . import analyze, check, convert
from .common import TerminalFormatter, show

logger = logging.getLogger(__name__)
# what stops a run as Ctrl-C does (SIGINT itself included); a signal the platform lacks is left out
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
                     if hasattr(signal, name))


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line, like every other user error: the full usage is for --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {for_terminal(message)} (see --help)\n")


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


# Built once per process (3 ms, where parsing takes 0.1 ms: a sixth of a short run such as a fuzz
# case's): parsing does not change a parser, and what it is built from (targets, types, statistics)
# is fixed at import.
_parser = functools.cache(build_parser)


class Terminated(KeyboardInterrupt):
    """SIGTERM, SIGHUP or SIGQUIT, raised where Ctrl-C raises KeyboardInterrupt so that it takes the
    same way out: every ``with Outputs`` block removes its staging folder on the way."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


def _raised(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _ending(signum: int) -> int:
    """The last line of a run ``signum`` stopped, said; its exit code."""
    said = ("interrupted" if signum == signal.SIGINT else "terminated" if signum == signal.SIGTERM
            else f"terminated ({signal.Signals(signum).name})")
    with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
        print(f"onnx-precision: {said}", file=sys.stderr)
    return 128 + signum  # as a shell reports a process the signal ended


def main(argv: Sequence[str] | None = None) -> int:
    # Only the main thread may set handlers (a caller may run main() in a thread: then signals are
    # the caller's to handle, and SignalStop does nothing).
    with SignalStop(STOP_SIGNALS, _raised, _ending) as stopping:
        try:
            return _main(argv)
        except KeyboardInterrupt as e:  # at any moment, parsing included: no traceback, no partial outputs
            return stopping.end(e.signum if isinstance(e, Terminated) else signal.SIGINT)


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse already printed its one-line usage error
        return int(e.code or 0)
    # an option not given is its default itself: a run gets its own copy of a list the parser keeps
    args = argparse.Namespace(**{k: list(v) if isinstance(v, list) else v for k, v in vars(args).items()})
    verbosity = getattr(args, "verbose", 0) - getattr(args, "quiet", 0)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TerminalFormatter("%(message)s"))
    logging.basicConfig(
        level=logging.WARNING if verbosity < 0 else logging.DEBUG if verbosity > 0 else logging.INFO,
        handlers=[handler], force=True)
    try:
        return int(args.run(args))
    except PrecisionError as e:
        show([f"onnx-precision: error: {e}"], sys.stderr)
        return e.exit_code
    except MemoryError:  # the run's own work (the user's files were read within their bounds)
        print("onnx-precision: error: out of memory (fewer or smaller samples, or a machine with more "
              "memory)", file=sys.stderr)
        return 1
    except OSError as e:  # the machine, not the input: a full /tmp, a lost mount, too many open files
        where = f" ({e.filename})" if e.filename else ""
        show([f"onnx-precision: error: {e.strerror or e}{where}"], sys.stderr)
        return 1
    except Exception as e:  # a bug: one line that asks for the report, the traceback with -v
        logger.debug("onnx-precision: internal error", exc_info=True)
        show([f"onnx-precision: internal error (a bug in onnx-precision, not in your input): "
              f"{type(e).__name__}: {_first_line(e)}; please report it with the command and "
              f"what -v prints"], sys.stderr)
        return 1


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""

