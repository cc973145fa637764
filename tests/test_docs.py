"""The README is a front door and docs/cli/ holds one page per command: every command `gimletc --help` lists is in
the README's table with a link to its page, every page is linked from the README, every relative link in the
README and docs/ resolves (file and heading), the README stays under 12 KB, and every `gimletc` command line the
README (and each page's runnable blocks) shows parses with the real parser.

The parser is `compiler.cli.main.build_parser`, the one `gimletc` itself runs; lines are only parsed, never run.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from compiler.cli.main import build_parser
from tests.conftest import REPO

README = REPO / "README.md"
CLI_DOCS = REPO / "docs" / "cli"
#: Markdown files whose relative links must resolve: the README and every page under docs/.
LINKED_FILES = (README, *sorted((REPO / "docs").rglob("*.md")))

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")


def commands() -> list[str]:
    """The commands `gimletc --help` lists, in its order."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return [a.dest for a in sub._choices_actions]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced code block."""
    return [(m.group(1).strip(), m.group(2)) for m in _FENCE.finditer(text)]


def prose(text: str) -> str:
    """`text` without its fenced blocks and inline code spans (their brackets are not links)."""
    return re.sub(r"`[^`\n]*`", "", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, spaces as hyphens.

    >>> slug("Real engines here: `gimletc deploy --local` and `gimletc bench`")
    'real-engines-here-gimletc-deploy---local-and-gimletc-bench'
    >>> slug("The reference runtime's image (`Dockerfile`)")
    'the-reference-runtimes-image-dockerfile'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    return [target for target in _LINK.findall(prose(path.read_text(encoding="utf-8")))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: are not ours to check


def command_table() -> dict[str, str]:
    """{command: its row} of the README's table of commands (rows whose first cell names `gimletc COMMAND`)."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|[^|]*`gimletc ([a-z]+)`", line)
        if m:
            rows[m.group(1)] = line
    return rows


def test_readme_is_a_front_door_under_12_kb():
    size = len(README.read_bytes())
    assert size < 12_000, f"README.md is {size} bytes: move detail to docs/cli/<command>.md or docs/"


def test_every_command_is_in_the_readme_table_with_its_page():
    table = command_table()
    for command in commands():
        assert command in table, f"`gimletc {command}` is missing from the README's table of commands"
        assert f"(docs/cli/{command}.md)" in table[command], f"the README's row of {command} links no docs/cli page"
        assert (CLI_DOCS / f"{command}.md").is_file(), f"docs/cli/{command}.md does not exist"
    assert sorted(table) == sorted(commands()), "the README's table names a command gimletc does not have"


def test_every_cli_page_is_a_command_linked_from_the_readme():
    links = set(relative_links(README))
    for page in sorted(CLI_DOCS.glob("*.md")):
        assert page.stem in commands(), f"docs/cli/{page.name} documents no command of `gimletc --help`"
        assert f"docs/cli/{page.name}" in {link.split("#")[0] for link in links}, \
            f"docs/cli/{page.name} is not linked from README.md"


@pytest.mark.parametrize("path", LINKED_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    for link in relative_links(path):
        target, _, anchor = link.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        assert resolved.exists(), f"{path.relative_to(REPO)}: link {link!r} names no file"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), \
                f"{path.relative_to(REPO)}: link {link!r}: {resolved.name} has no heading with that anchor"


def command_lines(path: Path) -> list[str]:
    """The `gimletc ...` command lines of a Markdown file: in the README every line of every fenced block; in a
    docs/cli page the lines of its ```bash blocks and the `$ gimletc` lines of shown output (its usage synopses,
    with placeholders such as MODEL and [--flag X], are not command lines)."""
    lines = []
    for info, body in fenced_blocks(path.read_text(encoding="utf-8")):
        for line in body.splitlines():
            shown = line.startswith("$ ")
            if path == README or info == "bash" or shown:
                lines += [part.strip() for part in line.removeprefix("$ ").split("&&")]
    return [line for line in lines if re.match(r"(\S*/)?gimletc ", line)]


def parse(line: str) -> None:
    """Parse one command line with gimletc's own parser (not run): a bad flag fails with its one-line error."""
    argv = shlex.split(line, comments=True)
    if argv[-1] == "&":
        argv.pop()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit as e:
            assert e.code == 0, f"{line!r} does not parse: {err.getvalue().strip()}"


@pytest.mark.parametrize("path", (README, *sorted(CLI_DOCS.glob("*.md"))), ids=lambda p: str(p.relative_to(REPO)))
def test_command_lines_parse(path):
    lines = command_lines(path)
    if path == README:
        assert any(line.startswith(".venv/bin/gimletc compile") for line in lines), "the install line is not seen"
    for line in lines:
        parse(line)


def test_a_bad_flag_is_caught():
    with pytest.raises(AssertionError, match="does not parse"):
        parse("gimletc compile llama-tiny --cluster c.yaml --workload w.yaml --out x/ --no-such-flag")
