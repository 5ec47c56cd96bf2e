"""Write docs/cli.md, the command-line reference, from the argparse parser itself.

    python scripts/cli_reference.py            # rewrite docs/cli.md
    python scripts/cli_reference.py --check    # exit 1 if docs/cli.md differs from the parser

Every option of every command, by the parser's own option groups, with its help text as ``--help``
shows it (``%(default)s`` expanded). The page is never edited by hand: tests/test_docs.py compares the
committed page with :func:`render`, so a change to an option is a change to the page in the same commit.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from onnx_precision.cli import build_parser  # noqa: E402

PAGE = os.path.join(ROOT, "docs", "cli.md")
REGENERATE = "python scripts/cli_reference.py"

# What Markdown would read as markup in a help text: a table cell's bar, emphasis, code, an HTML tag.
_MARKUP = str.maketrans({c: "\\" + c for c in "\\|*_`"} | {"<": "&lt;", ">": "&gt;"})


def _text(help_text: str) -> str:
    return " ".join(help_text.split()).translate(_MARKUP)


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each command, in the order ``--help`` lists them."""
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    return [(name, helps.get(name, ""), p) for name, p in sub.choices.items()]


def _invocation(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    """``-o``, ``--output`` ``OUTPUT``: every spelling, then what it takes (once, not per spelling)."""
    if not action.option_strings:
        return f"`{formatter._format_args(action, action.dest)}`"
    names = ", ".join(f"`{s}`" for s in action.option_strings)
    takes = formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
    return f"{names} `{takes}`" if takes else names


def _rows(parser: argparse.ArgumentParser) -> list[str]:
    """One table per option group that has options, under the group's title."""
    formatter = parser._get_formatter()
    lines: list[str] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction,
                                                                         argparse._SubParsersAction))]
        if not actions:
            continue
        lines += ["", f"**{_text(group.title or '')}**", ""]
        if group.description:
            lines += [_text(group.description), ""]
        kind = "option" if any(a.option_strings for a in actions) else "argument"
        lines += [f"| {kind} | meaning |", "|---|---|"]
        for action in actions:
            meaning = _text(formatter._expand_help(action)) if action.help else ""
            if action.required and action.option_strings:
                meaning = f"required; {meaning}"
            lines.append(f"| {_invocation(action, formatter)} | {meaning} |")
    return lines


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole page, as docs/cli.md holds it."""
    parser = parser or build_parser()
    commands = subcommands(parser)
    lines = [
        "# Command-line reference",
        "",
        f"<!-- generated from the argparse parser by {REGENERATE}: edit the parser, not this page -->",
        "",
        f"Every option of `{parser.prog}`'s commands, as `--help` gives it, by option group. The "
        "[README](../README.md) says which to reach for; each command's `--help` prints the same.",
        "",
        " · ".join(f"[`{name}`](#{parser.prog}-{name})" for name, _, _ in commands),
    ]
    lines += _rows(parser)
    for name, summary, sub in commands:
        lines += ["", f"## {parser.prog} {name}", "", f"{_text(summary)}."]
        lines += _rows(sub)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    check = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    check.add_argument("--check", action="store_true", help="compare instead of writing")
    args = check.parse_args(argv)
    text = render()
    if args.check:
        with open(PAGE, encoding="utf-8") as f:
            same = f.read() == text
        said = "matches the parser" if same else f"differs from the parser: run {REGENERATE}"
        print(f"{os.path.relpath(PAGE, ROOT)} {said}")
        return 0 if same else 1
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(PAGE, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
