"""The shell commands of README.md and docs/, read the one way every test reads them (issue 33).

A fenced block tagged ``bash``, ``sh`` or ``console`` holds commands (untagged
blocks hold output and layouts). The line right before it says who vouches for
them, in one of two forms::

    <!-- commands: run by test/tools/test_x.py[ test/tools/test_y.py ...] -->
    <!-- commands: need a real robot -->

``run by``: the named test files read this page's block through this module
(``block_run_by``) and run its commands; ``need``: what they need that CI here
has not (a GPU, a second machine, a real robot, a long run, a desktop).

The same marker line right before a paragraph covers the command spans of that
paragraph (``Block.language == "inline"``): how a page vouches for a complete
command it writes inline. test/tools/test_doc_commands.py holds the rules.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from support.paths import REPO

SHELL_LANGUAGES = ("bash", "sh", "console")
#: Pages the bench/ generators write (their commands are the generators'): read, but their blocks
#: need no marker.
GENERATED = ("docs/reference/benchmarks.md", "docs/reference/reliability.md")

MARKER = re.compile(r"^\s*<!--\s*commands:(.*?)-->\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")
#: A code span that starts like a command: an interpreter, ros2, a script, a node executable.
COMMAND_SPAN = re.compile(r"(\S*python |ros2 |\./scripts/|scripts/|\w+_node )")
#: What a span that is a template, not a command to run as written, holds: ``<node>``, ``...``,
#: ``[--robot]``, a word in capitals (``--torch-threads N``, ``--work-dir DIR``).
PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|…|\[|(?<![\w$/.:=-])[A-Z][A-Z0-9_]*(?![\w/.:=-])")


@dataclass(frozen=True)
class Marker:
    """A ``<!-- commands: ... -->`` line: ``kind`` is "run by" or "need"; anything else is
    ``malformed``."""

    text: str
    kind: str = ""
    tests: tuple[str, ...] = ()
    need: str = ""

    @property
    def malformed(self) -> bool:
        return not (self.kind == "run by" and self.tests) and not (
            self.kind == "need" and self.need
        )


@dataclass(frozen=True)
class Block:
    """A fenced shell block (or, ``language == "inline"``, a marked paragraph's command spans) of
    one page."""

    page: str  # relative to the repository
    line: int  # 1-based: the opening fence, or the paragraph's first line
    language: str
    marker: Marker | None
    commands: tuple[str, ...]
    body: str  # the block's text as written (a paragraph's text for "inline")

    def console(self) -> list[tuple[str, list[str]]]:
        """(command, the output lines shown under it) for every ``$ `` line of a console block."""
        recipes: list[tuple[str, list[str]]] = []
        for line in self.body.splitlines():
            if line.startswith("$ "):
                recipes.append((line[2:], []))
            elif recipes:
                recipes[-1][1].append(line)
        return recipes


def parse_marker(line: str) -> Marker | None:
    found = MARKER.match(line)
    if not found:
        return None
    text = found.group(1).strip()
    if text.startswith("run by "):
        return Marker(text, "run by", tuple(text[len("run by ") :].split()))
    if text.startswith("need "):
        return Marker(text, "need", need=text[len("need ") :].strip())
    return Marker(text)


def words(command: str) -> list[str]:
    """A command as the shell splits it (quotes removed, a trailing ``# comment`` dropped)."""
    return shlex.split(command, comments=True)


def shell_commands(language: str, body: str) -> list[str]:
    """The commands of a fenced block: its lines, continuations joined; comments and blank lines
    left out.

    In a console block only the ``$ `` lines are commands; the rest is their output.
    """
    joined = re.sub(r"\\\n\s*", " ", body)
    lines = joined.splitlines()
    if language == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def page_name(page: Path | str, root: Path = REPO) -> str:
    path = Path(page)
    return str((path if path.is_absolute() else root / path).resolve().relative_to(root.resolve()))


def _page_path(page: Path | str, root: Path) -> Path:
    path = Path(page)
    return path if path.is_absolute() else root / path


def _prose_lines(lines: list[str]) -> list[str]:
    """The page with every fenced block's lines blanked (line numbers kept)."""
    prose, inside = [], False
    for line in lines:
        if FENCE.match(line):
            inside = not inside
            prose.append("")
        else:
            prose.append("" if inside else line)
    return prose


def command_spans(text: str) -> list[tuple[int, str]]:
    """(1-based line, span) for every inline code span of ``text`` that starts like a command."""
    found = []
    for match in re.finditer(r"`([^`]+)`", text):
        span = match.group(1).replace("\n", " ")
        if COMMAND_SPAN.match(span):
            found.append((text.count("\n", 0, match.start()) + 1, re.sub(r"\s+", " ", span)))
    return found


def inline_commands(page: Path | str, root: Path = REPO) -> list[tuple[int, str]]:
    """(line, span) for every command span in the page's prose (outside fenced blocks)."""
    return command_spans("\n".join(_prose_lines(_page_path(page, root).read_text().splitlines())))


def is_complete(span: str) -> bool:
    """A span that runs as written: no placeholder, and more than a program with its subcommand
    words.

    ``ros2 param set``, ``scripts/setup_env.sh`` name a tool; ``ros2 topic hz /tf`` and
    ``.venv/bin/python -m bench.soak --minutes 5`` are commands; ``ros2 param set <node> ...`` is a
    template.
    """
    if PLACEHOLDER.search(span):
        return False
    parts = span.split()
    return any(not re.fullmatch(r"[a-z_]+", part) for part in parts[1:])


def blocks(page: Path | str, root: Path = REPO) -> list[Block]:
    """Every fenced shell block of the page and every marked paragraph, with its marker (None:
    unmarked)."""
    path = _page_path(page, root)
    name = page_name(path, root)
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if fence:
            end = next(
                (j for j in range(index + 1, len(lines)) if lines[j].startswith("```")), len(lines)
            )
            language = fence.group(1)
            if language in SHELL_LANGUAGES:
                body = "\n".join(lines[index + 1 : end]) + "\n"
                marker = parse_marker(lines[index - 1]) if index else None
                found.append(
                    Block(
                        name,
                        index + 1,
                        language,
                        marker,
                        tuple(shell_commands(language, body)),
                        body,
                    )
                )
            index = end + 1
            continue
        marker = parse_marker(lines[index])
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if marker and following.strip() and not FENCE.match(following):
            end = next(
                (j for j in range(index + 1, len(lines)) if not lines[j].strip()), len(lines)
            )
            body = "\n".join(lines[index + 1 : end])
            spans = tuple(span for _, span in command_spans(body))
            found.append(Block(name, index + 2, "inline", marker, spans, body))
            index = end
            continue
        index += 1
    return found


def block_run_by(page: Path | str, test_file: Path | str, root: Path = REPO) -> list[Block]:
    """The page's blocks (fenced and inline) whose marker says ``test_file`` runs them, in page
    order."""
    test = page_name(test_file, root)
    return [block for block in blocks(page, root) if block.marker and test in block.marker.tests]


def pages(root: Path = REPO) -> list[Path]:
    """README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def without(argv: list[str], *names_: str) -> list[str]:
    """argv without the options ``names_`` and their values."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in names_:
            skip = True
        else:
            kept.append(word)
    return kept
