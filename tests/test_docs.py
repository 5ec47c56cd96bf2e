"""The user's pages hold together: docs/cli.md is what the parser says."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import cli_reference  # noqa: E402


def test_the_cli_reference_is_what_the_parser_says():
    with open(cli_reference.PAGE, encoding="utf-8") as f:
        committed = f.read()
    assert committed == cli_reference.render(), (
        f"docs/cli.md is not what the parser says (an option was added, renamed or regrouped): "
        f"run `{cli_reference.REGENERATE}` and commit docs/cli.md")


def test_the_cli_reference_has_every_option_of_every_command():
    with open(cli_reference.PAGE, encoding="utf-8") as f:
        page = f.read()
    for name, _, parser in cli_reference.subcommands(cli_reference.build_parser()):
        section = page.split(f"\n## onnx-precision {name}\n", 1)[1].split("\n## ", 1)[0]
        options = {s for action in parser._actions for s in action.option_strings} - {"-h", "--help"}
        assert options and {s for s in options if f"`{s}`" not in section} == set(), name
