"""The command line's parser is built once per process (it cost 3 ms a call of main(), a sixth of a
short run's), and a run still starts from the defaults: one cannot change what the next is given."""

from __future__ import annotations

import argparse

import pytest

from onnx_precision import cli
from onnx_precision.cli import convert, main


@pytest.fixture
def fresh_parser():
    """The cached parser built within the test (from what it patched), and dropped after it."""
    cli._parser.cache_clear()
    yield
    cli._parser.cache_clear()


def test_the_parser_is_built_once_for_every_run_of_a_process(fresh_parser, monkeypatch, capsys):
    built = []
    add_parser = convert.add_parser
    monkeypatch.setattr(convert, "add_parser", lambda sub: built.append(1) or add_parser(sub))
    assert main(["--version"]) == 0
    assert main(["convert", "m.onnx"]) == 2
    assert "the following arguments are required: -o/--output" in capsys.readouterr().err
    assert len(built) == 1


def test_a_run_that_changes_its_arguments_leaves_the_next_runs_defaults_alone(fresh_parser, monkeypatch):
    given = []

    def run(args: argparse.Namespace) -> int:
        given.append((list(args.keep_fp32), list(args.input_shape)))
        args.keep_fp32.append("^changed$")
        args.input_shape.append({"x": (1,)})
        return 0
    monkeypatch.setattr(convert, "run", run)
    assert main(["convert", "m.onnx", "-o", "o.onnx"]) == 0
    assert main(["convert", "m.onnx", "-o", "o.onnx", "--keep-fp32", "^a$"]) == 0
    assert main(["convert", "m.onnx", "-o", "o.onnx"]) == 0
    assert given == [([], []), (["^a$"], []), ([], [])]
