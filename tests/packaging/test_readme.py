"""README.md is short, every command it shows is run by a test, and every link resolves.

A command is a line of a fenced ``bash`` block. Each block sits in a section whose commands a
test runs as written (:data:`RUN_BY`); a block in any other section fails this test until a
test runs it. The links of README.md, docs/ and the flow-repo template must point at files
that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAX_LINES = 250
# Section of README.md -> the test that runs its bash block as written.
RUN_BY = {
    "## The two commands": "tests/flows/test_demo.py",  # make demo; make test: .ci/run
    "## Quickstart: your own flow repo": "tests/packaging/test_quickstart.py",
    "## Run a flow in a container": "tests/packaging/test_quickstart.py",
    "## Watch the writer": "tests/packaging/test_quickstart.py",
}
# Linked before it exists: written on the branch that adds who may call `producer-lib serve`.
PENDING = {REPO / "docs" / "SERVING.md"}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def bash_blocks(text: str) -> list[tuple[str, str]]:
    """``(section heading, block)`` of every fenced bash block of a Markdown text."""
    found = []
    heading = ""
    for part in re.split(r"^(## .*)$", text, flags=re.M):
        if part.startswith("## "):
            heading = part.strip()
            continue
        found += [(heading, b) for b in re.findall(r"^```bash\n(.*?)^```$", part, re.S | re.M)]
    return found


def commands(block: str) -> list[str]:
    """The command lines of a block, comments dropped."""
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines; move the details to docs/"


def test_every_block_of_commands_is_run_by_a_test():
    blocks = bash_blocks(README.read_text())
    assert {heading for heading, _ in blocks} == set(RUN_BY), "a new block: add the test"
    for heading in {heading for heading, _ in blocks}:
        test = (REPO / RUN_BY[heading]).read_text()
        assert heading.removeprefix("## ") in test or heading == "## The two commands", heading
    (two,) = [block for heading, block in blocks if heading == "## The two commands"]
    assert commands(two) == ["make demo", "make test"]
    assert '"make", "demo"' in (REPO / RUN_BY["## The two commands"]).read_text()
    assert "make test" in (REPO / ".ci" / "run").read_text()  # the suite cannot run itself


def _markdown_files() -> list[Path]:
    return [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))] + [
        REPO / "templates" / "flow_repo" / "README.md"
    ]


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_points_at_a_file(page: Path):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a web address, or a place on the same page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() and path not in PENDING:
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)} links to missing files: {broken}"
