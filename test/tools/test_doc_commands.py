"""Every shell command in README.md and docs/ runs in a test or says what it needs (issue 33).

The rule, read from the pages through support/doc_commands.py (the helper the
tests that run doc commands read them with, so the pages cannot drift from
the tests):

* Every fenced ``bash`` / ``sh`` / ``console`` block has, on the line right
  before it, ``<!-- commands: run by <test file> [<test file> ...] -->`` or
  ``<!-- commands: need <what> -->`` (``need a GPU``, ``need a real robot``,
  ``need a second machine and rmw_zenoh``, ``need a long run (about N
  minutes)``: what CI here has not). A ``run by`` names test files that exist,
  name this page and read it with ``block_run_by``: they extract the block and
  run its commands as written (the test says what it appends, such as a
  shorter ``--duration`` or this suite's checkpoint, and why).
* Inline code spans are prose. One that names a tool or writes a template
  (``ros2 param set``, ``scripts/setup_env.sh``, ``ros2 param set <node> ...``,
  ``[--robot]``) is not a command to run as written and needs no marker. A
  *complete* one (arguments, no placeholder: ``ros2 topic hz /tf``) is a
  command: it either repeats, word for word from the start, a command of a
  marked fenced block (of this page or another checked one: it shares that
  block's marker), or its paragraph is marked: the same marker line right
  before the paragraph covers its command spans, and a ``run by`` test reads
  that paragraph through ``block_run_by`` (``language == "inline"``) and runs them.
* docs/reference/benchmarks.md and docs/reference/reliability.md are written by bench/ (their
  commands are the generators', whose smoke runs test/bench covers); their
  blocks carry no marker and their spans are not checked. Every other page is:
  README.md and every page under docs/ (docs/**/*.md), the reference pages included.

Every fenced command and every inline command span is also held to three
as-written rules:

* ``python -m lerobot_ros...`` / ``python -m bench...`` name the venv's
  interpreter (``.venv/bin/python``): outside the venv a bare ``python`` has
  no lerobot_ros;
* a ``ros2 topic echo`` of ``robot_description`` (latched: reliable and
  transient local) passes both QoS options, or it waits forever;
* a node executable given ``name:=value`` reads it as a parameter
  (``node_support.parameter_shorthand``), the form ``ros2 launch`` uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobot_ros.node_shell.node_support import parameter_shorthand
from support.doc_commands import GENERATED, blocks, inline_commands, is_complete, page_name, pages
from support.paths import REPO

PAGES = [page for page in pages() if page_name(page) not in GENERATED]
NODE_EXECUTABLES = (
    "policy_server_node",
    "chunk_executor_node",
    "sim_robot_node",
    "episode_recorder_node",
)


def marked_commands(page_list: list[Path], root: Path = REPO) -> list[str]:
    """The commands of every fenced block that carries a well-formed marker."""
    return [
        command
        for page in page_list
        for block in blocks(page, root)
        if block.language != "inline" and block.marker and not block.marker.malformed
        for command in block.commands
    ]


def repeats(span: str, command: str) -> bool:
    words = span.split()
    return command.split()[: len(words)] == words


def violations(page: Path, root: Path = REPO, elsewhere: list[str] = ()) -> list[str]:
    """What breaks the rule on one page (``elsewhere``: marked commands of the other pages)."""
    name = page_name(page, root)
    found = []
    page_blocks = blocks(page, root)
    for block in page_blocks:
        where = f"{name}:{block.line}"
        if block.marker is None:
            found.append(
                f"{where}: ```{block.language} block without '<!-- commands: run by <test file> "
                "-->' or "
                f"'<!-- commands: need <what> -->' on the line before it"
            )
            continue
        if block.marker.malformed:
            found.append(
                f"{where}: marker '{block.marker.text}' is neither 'run by <test file>...' nor "
                "'need <what>'"
            )
            continue
        if block.language == "inline" and not block.commands:
            found.append(f"{where}: a marker before a paragraph with no command span")
        for test in block.marker.tests:
            path = root / test
            if not path.is_file():
                found.append(f"{where}: 'run by {test}': no such test file")
                continue
            source = path.read_text()
            if name not in source or "block_run_by" not in source:
                found.append(
                    f"{where}: 'run by {test}': that file does not read {name} with "
                    f"support.doc_commands.block_run_by, so it does not run this block"
                )
    fenced = [
        command
        for block in page_blocks
        if block.language != "inline" and block.marker and not block.marker.malformed
        for command in block.commands
    ] + list(elsewhere)
    in_marked_paragraphs = {
        span
        for block in page_blocks
        if block.language == "inline" and block.marker and not block.marker.malformed
        for span in block.commands
    }
    for line, span in inline_commands(page, root):
        if (
            is_complete(span)
            and span not in in_marked_paragraphs
            and not any(repeats(span, c) for c in fenced)
        ):
            found.append(
                f"{name}:{line}: `{span}` is a complete command that no marked block repeats and "
                "whose "
                f"paragraph has no '<!-- commands: ... -->' line before it"
            )
    return found


ALL_MARKED = marked_commands(PAGES)


@pytest.mark.parametrize("page", PAGES, ids=[page_name(page) for page in PAGES])
def test_every_command_runs_in_a_test_or_says_what_it_needs(page):
    assert violations(page, elsewhere=ALL_MARKED) == []


def test_the_rule_refuses_unmarked_blocks_and_a_test_that_does_not_read_the_page(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_reads.py").write_text(
        "from support.doc_commands import block_run_by\nBLOCKS = block_run_by('docs/page.md', "
        "__file__)\n"
    )
    (tmp_path / "test" / "test_other.py").write_text(
        "from support.doc_commands import block_run_by\nBLOCKS = block_run_by('docs/other.md', "
        "__file__)\n"
    )
    page = tmp_path / "docs" / "page.md"

    def check(text: str) -> list[str]:
        page.write_text(text)
        return violations(page, tmp_path)

    assert (
        check("```bash\nros2 node list\n```\n")
        and "without" in check("```bash\nros2 node list\n```\n")[0]
    )
    assert check("text\n\n```console\n$ ros2 node list\n```\n")
    assert check("```text\nros2 node list\n```\n") == [], (
        "untagged and text blocks hold output, not commands"
    )
    assert (
        check("<!-- commands: run by test/test_reads.py -->\n```bash\nros2 node list\n```\n") == []
    )
    assert check("<!-- commands: need a real robot -->\n```sh\nros2 node list\n```\n") == []
    assert (
        "does not read docs/page.md"
        in check("<!-- commands: run by test/test_other.py -->\n```bash\nros2 node list\n```\n")[0]
    )
    assert (
        "no such test file"
        in check("<!-- commands: run by test/test_gone.py -->\n```bash\nls\n```\n")[0]
    )
    assert "neither" in check("<!-- commands: run somewhere -->\n```bash\nls\n```\n")[0]
    assert "neither" in check("<!-- commands: need -->\n```bash\nls\n```\n")[0]
    # A marker two lines up covers nothing.
    assert check("<!-- commands: need a GPU -->\n\n```bash\nros2 node list\n```\n")
    # Inline: a complete command needs a marked block that repeats it or a marked paragraph; names
    # and templates not.
    assert "`ros2 topic hz /tf`" in check("Run `ros2 topic hz /tf` to see.\n")[0]
    assert (
        check(
            "Use `ros2 topic hz` or `ros2 param set <node> x 1` or `scripts/setup_env.sh "
            "[--robot]`.\n"
        )
        == []
    )
    assert (
        check(
            "Try `.venv/bin/python -m bench.x --threads N` or `.venv/bin/python -m y --dir DIR`.\n"
        )
        == []
    )
    assert check("Run `ros2 topic echo /A_B std_msgs/msg/String`.\n"), (
        "a capital in a name is no placeholder"
    )
    assert check("<!-- commands: need a real robot -->\nRun `ros2 topic hz /tf` to see.\n") == []
    assert (
        check(
            "<!-- commands: need a real robot -->\n```bash\nros2 topic hz /tf --window 5\n```\n\n"
            "As `ros2 topic hz /tf` showed.\n"
        )
        == []
    )
    assert check("<!-- commands: need a real robot -->\nNo command here.\n")
    assert (
        "does not read"
        in check("<!-- commands: run by test/test_other.py -->\nRun `ros2 topic hz /tf`.\n")[0]
    )


def as_written() -> list[tuple[str, str]]:
    """(page, command) for every command of a fenced shell block and every inline span that starts
    like one."""
    found = []
    for page in PAGES:
        name = page_name(page)
        found += [
            (name, command)
            for block in blocks(page)
            if block.language != "inline"
            for command in block.commands
        ]
        found += [(name, span) for _, span in inline_commands(page)]
    return found


COMMANDS = as_written()


def test_the_pages_hold_commands():
    assert len(COMMANDS) > 30 and any("ros2 launch" in command for _, command in COMMANDS)


@pytest.mark.parametrize("page, command", [each for each in COMMANDS if "python -m " in each[1]])
def test_python_modules_run_with_the_venvs_interpreter(page, command):
    interpreter = command.split(" -m ")[0].split()[-1]
    assert interpreter.endswith(".venv/bin/python"), (
        f"{page}: `{command}` needs .venv/bin/python (outside the venv)"
    )


@pytest.mark.parametrize(
    "page, command",
    [each for each in COMMANDS if "topic echo" in each[1] and "robot_description" in each[1]],
)
def test_a_robot_description_echo_matches_its_latched_qos(page, command):
    assert (
        "--qos-durability transient_local" in command and "--qos-reliability reliable" in command
    ), f"{page}: `{command}` waits forever without both QoS options"


@pytest.mark.parametrize(
    "page, command",
    [each for each in COMMANDS if each[1].split()[0] in NODE_EXECUTABLES and ":=" in each[1]],
)
def test_a_node_given_name_value_reads_them_as_parameters(page, command):
    words = command.split()
    converted = parameter_shorthand(words)
    before_ros_args = words[: words.index("--ros-args")] if "--ros-args" in words else words
    for word in before_ros_args[1:]:
        if ":=" in word and not word.startswith("__"):
            assert ["-p", word] == converted[
                converted.index(word) - 1 : converted.index(word) + 1
            ], (page, command)
