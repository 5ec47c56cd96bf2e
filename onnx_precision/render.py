"""The one place where text from a model reaches an output: one renderer for each place it can go.

A node, tensor or input name is whatever the model's author wrote, newlines, terminal escape sequences
and quotes included, and so is any sentence that quotes one (a note, a reason, an error). Every writer
renders what it writes through the function for its sink:

* a terminal (stdout, stderr, a log line): :func:`for_terminal`, applied where each line is printed
  (:func:`.cli.common.show`, :class:`.cli.common.TerminalFormatter`), so that no sentence can bring its
  own control sequence;
* a shell: :func:`for_shell` for each word of a command line (the ``next:`` line, the ``--trt-flags``
  file's commands, through :func:`.suggested.quoted`), and :func:`shell_script` for the lines of a
  file meant to be run, comments included (a newline in a comment would end it and run the rest);
* Markdown: :func:`for_markdown` for a name (a code span), :func:`markdown_text` for a sentence;
* SVG: :func:`for_svg`.

JSON needs no renderer: ``json.dumps`` with its default ``ensure_ascii=True`` writes every control and
non-ASCII character as ``\\uXXXX``, so a name is data in every JSON file we write.

What a terminal must never receive raw (:data:`UNSAFE`): C0 controls (newline, carriage return, ESC,
which starts CSI and OSC sequences, tab), DEL, C1 controls (U+009B is CSI by itself), the bidirectional
controls that reorder what is shown (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C), the line
and paragraph separators U+2028/U+2029, and the noncharacters U+FFFE/U+FFFF (which XML refuses). Each
is written as a visible escape (``\\n``, ``\\x1b``, ``\\u202e``). Everything else, non-ASCII letters
included, is kept, so an ordinary name prints exactly as it is.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from xml.sax.saxutils import escape as _xml_escape

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f"  # C0, DEL, C1
                    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional controls
                    "\u2028\u2029\ufffe\uffff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(c: str) -> str:
    """``c`` (one of :data:`UNSAFE`) as the escape Python would write: ``\\n``, ``\\x1b``, ``\\u202e``."""
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def for_terminal(text: str) -> str:
    """``text`` with every character of :data:`UNSAFE` written as a visible escape: one line, shown as
    written, that moves no cursor, sets no colour or link, and reorders nothing."""
    return UNSAFE.sub(lambda m: _visible(m.group()), text)


# --- shell ----------------------------------------------------------------------------------------


def for_shell(word: str) -> str:
    """``word`` as one shell word: :func:`shlex.quote` (``'...'``), or, where it holds a character of
    :data:`UNSAFE`, ANSI-C quoting (``$'...'``, bash, zsh, ksh, POSIX 2024) with each such character
    escaped, so a command stays on one line, shows what it runs, and passes ``word`` whole."""
    if not UNSAFE.search(word):
        return shlex.quote(word)
    return "$'" + "".join(_ansi_c(c) for c in word) + "'"


def _ansi_c(c: str) -> str:
    if c in "\\'":
        return "\\" + c
    if c in _NAMED:
        return _NAMED[c]
    if UNSAFE.match(c):  # as bytes: bash's \u depends on the locale, \xHH does not
        return "".join(f"\\x{b:02x}" for b in c.encode("utf-8"))
    return c


_ANSI_C_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{1,2})|(.))", re.DOTALL)
_ANSI_C_NAMED = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b",
                 "E": "\x1b", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def from_ansi_c(body: str) -> str:
    """What the shell makes of ``$'body'``: the inverse of :func:`for_shell`'s quoting, for readers of
    the command files we write (``\\xHH`` bytes are read as UTF-8 together)."""
    out = bytearray()
    at = 0
    for m in _ANSI_C_ESCAPE.finditer(body):
        out += body[at:m.start()].encode("utf-8")
        hex_digits, char = m.groups()
        out += bytes([int(hex_digits, 16)]) if hex_digits else \
            _ANSI_C_NAMED.get(char, "\\" + char).encode("utf-8")
        at = m.end()
    out += body[at:].encode("utf-8")
    return out.decode("utf-8", "replace")


def shell_script(lines: Iterable[str]) -> str:
    """Lines of a file meant to be run by a shell: commands whose words came through :func:`for_shell`,
    and comments. Each passes through :func:`for_terminal` (unchanged for a command, whose quoting
    leaves nothing to escape), so no comment can hold a line break that ends it, nor a control
    sequence for whoever reads the file in a terminal."""
    return "".join(for_terminal(line) + "\n" for line in lines)


# --- Markdown -------------------------------------------------------------------------------------


def for_markdown(name: str, *, cell: bool = False) -> str:
    """``name`` as a Markdown code span, shown verbatim: fenced by one backtick more than its longest
    run of backticks (and padded where it starts or ends with one), its controls escaped, and in a
    table ``cell`` its ``|`` escaped (GFM splits cells on ``|`` even inside a code span)."""
    text = for_terminal(name)
    runs = re.findall(r"`+", text)
    fence = "`" * (max(map(len, runs), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ")
                                                                  and text.strip()) else ""
    span = f"{fence}{pad}{text}{pad}{fence}"
    return span.replace("|", "\\|") if cell else span


# What would start markup in a sentence: a backslash that escapes the punctuation after it, a backtick (a
# code span), '<' before a letter, '/', '!' or '?' (an HTML tag, comment or autolink), ']' before '(' or
# '[' (a link or an image). A '<=' or 'y[0, 3]' of our own sentences starts none, and stays as it is.
_MARKDOWN_MARKUP = re.compile(r"""\\(?=[!-/:-@\[-`{-~])|`|<(?=[A-Za-z/!?])|\](?=[(\[])""")


def markdown_text(text: str, *, cell: bool = False) -> str:
    """A sentence (which may quote names) as Markdown text shown as written: its controls escaped, each
    character that would start markup backslash-escaped (:data:`_MARKDOWN_MARKUP`), and in a table
    ``cell`` its ``|`` too."""
    text = _MARKDOWN_MARKUP.sub(lambda m: "\\" + m.group(), for_terminal(text))
    return text.replace("|", "\\|") if cell else text


# --- SVG ------------------------------------------------------------------------------------------


def for_svg(text: str) -> str:
    """``text`` as SVG (XML) character data: its controls escaped (XML 1.0 has no way to write most
    of them), then ``&``, ``<`` and ``>`` as entities."""
    return _xml_escape(for_terminal(text))
