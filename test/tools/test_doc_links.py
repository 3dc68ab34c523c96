"""Every relative link of README.md and docs/ leads somewhere (issue 40).

The pages moved into docs/tutorials, docs/how-to, docs/reference and
docs/explanation, so a relative link changes with the folder depth of the page
that writes it; this test reads every page the way GitHub renders it:

* every Markdown link and image (``[text](target)``, ``![alt](target)``, a
  reference definition ``[name]: target``) outside fenced code blocks and
  code spans, whose target has no scheme (``https:``, ``mailto:``), names a
  file or folder that exists, relative to the page (or to the repository
  root for a target starting with ``/``);
* a ``#anchor`` into a Markdown page (the same page or another) is one that
  page defines: the GitHub anchor of one of its headings (lower case,
  punctuation but ``-`` and ``_`` dropped, spaces as ``-``, ``-1``, ``-2``...
  for repeats) or an explicit ``<a id="...">`` / ``<a name="...">``.

The pages are the ones support/doc_commands.py reads (README.md and every
``docs/**/*.md``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from support.doc_commands import page_name, pages
from support.paths import REPO

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
#: ``[text](target)`` and ``![alt](target)``, the text on one line or several (not across a blank
#: line): the target up to whitespace or the closing parenthesis (one level of parentheses inside
#: it allowed), or ``<...>``; an optional title after it.
INLINE_LINK = re.compile(
    r"!?\[(?:(?!\n\s*\n)[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|(?:[^()\s]|\([^()\s]*\))*)"
    r"(?:\s+[\"'(][^)]*)?\)"
)
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str, blank_code_spans: bool = True) -> list[tuple[int, str]]:
    """(line number, line) of the page outside fenced code blocks, code spans blanked unless
    ``blank_code_spans`` is false (a heading's anchor keeps their text)."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1) == fence:
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        if blank_code_spans:
            line = CODE_SPAN.sub(lambda span: " " * len(span.group(0)), line)
        lines.append((number, line))
    return lines


def heading_text(markdown: str) -> str:
    """A heading's text as GitHub renders it: links as their text, code and emphasis unmarked."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("*", "")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, only letters, digits, ``-``, ``_`` and
    spaces kept, each space a ``-``."""
    kept = "".join(
        char for char in heading_text(heading).strip().lower() if char.isalnum() or char in "-_ "
    )
    return kept.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every anchor ``page`` defines: its headings' (repeats numbered) and its explicit ones."""
    text = page.read_text(encoding="utf-8")
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(text, blank_code_spans=False):
        heading = HEADING.match(line)
        if heading:
            anchor = github_anchor(heading.group(2))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    found.update(HTML_ANCHOR.findall(text))
    return frozenset(found)


def links(page: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link and image of ``page``; a link's text may span lines."""
    numbered = prose_lines(page.read_text(encoding="utf-8"))
    prose = dict(numbered)
    # Fenced blocks become empty lines, so a link never joins text across one and the offsets
    # still give the page's line numbers.
    text = "\n".join(prose.get(number, "") for number in range(1, max(prose, default=0) + 1))
    found = [
        (text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in INLINE_LINK.finditer(text)
    ]
    found += [
        (number, definition.group(1))
        for number, line in numbered
        if (definition := REFERENCE_DEFINITION.match(line))
    ]
    return sorted(((number, target.strip("<>")) for number, target in found), key=lambda x: x[0])


def problem(page: Path, target: str, root: Path = REPO) -> str | None:
    """Why ``target``, written in ``page``, leads nowhere; None when it is fine or not relative."""
    if not target or SCHEME.match(target):
        return None
    path, _, anchor = target.partition("#")
    if path:
        base = root if path.startswith("/") else page.parent
        destination = (base / path.lstrip("/")).resolve()
        if not destination.exists():
            return f"{path} does not exist"
    else:
        destination = page
    if anchor and destination.suffix == ".md" and destination.is_file():
        if anchor not in anchors(destination):
            return f"{page_name(destination, root)} has no heading or anchor #{anchor}"
    return None


def test_the_pages_are_found():
    names = {page_name(page) for page in pages()}
    assert {"README.md", "docs/README.md", "docs/reference/benchmarks.md"} <= names
    assert {"tutorials", "how-to", "reference", "explanation"} <= {
        Path(name).parts[1] for name in names if name.startswith("docs/") and name.count("/") > 1
    }


@pytest.mark.parametrize("page", pages(), ids=page_name)
def test_every_relative_link_leads_to_a_file_and_its_anchor(page):
    broken = [
        f"{page_name(page)}:{number}: ({target}): {why}"
        for number, target in links(page)
        if (why := problem(page, target))
    ]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_github_anchors():
    assert github_anchor("Server (`lerobot_ros/server/`)") == "server-lerobot_rosserver"
    assert github_anchor("Real ROS 2 workspace (Jazzy or Kilted)") == (
        "real-ros-2-workspace-jazzy-or-kilted"
    )
    assert github_anchor("1. What the checkpoint expects") == "1-what-the-checkpoint-expects"
    assert github_anchor("What the server checks, and in which order") == (
        "what-the-server-checks-and-in-which-order"
    )
    assert github_anchor("RunPolicy action, start/stop services") == (
        "runpolicy-action-startstop-services"
    )
    assert github_anchor("Quickstart: [two](x.md) commands") == "quickstart-two-commands"


def test_the_checker_finds_what_is_broken(tmp_path):
    (tmp_path / "docs" / "how-to").mkdir(parents=True)
    (tmp_path / "docs" / "reference").mkdir()
    (tmp_path / "docs" / "reference" / "a.md").write_text(
        '# A page\n\n## Parameters\n\n## Parameters\n\n<a id="custom"></a>\n'
    )
    page = tmp_path / "docs" / "how-to" / "b.md"
    page.write_text(
        "# B\n\n"
        "[ok](../reference/a.md#parameters-1), [ok](../reference/a.md#custom), [ok](#b), "
        "![ok](../reference/a.md 'a title'), [ok](https://example.com/missing.md)\n\n"
        "[gone](a.md), [gone](../reference/a.md#nothing), [gone](#nowhere)\n\n"
        "[a text on\ntwo lines](../gone.md) [not\n\na link](../gone.md)\n\n"
        "`[code](missing.md)`\n\n```bash\n[code](missing.md)\n```\n\n"
        "[ref]: ../missing.md\n"
    )
    found = [problem(page, target, tmp_path) for _, target in links(page)]
    assert found == [
        None,
        None,
        None,
        None,
        None,
        "a.md does not exist",
        "docs/reference/a.md has no heading or anchor #nothing",
        "docs/how-to/b.md has no heading or anchor #nowhere",
        "../gone.md does not exist",
        "../missing.md does not exist",
    ]
