"""Every code block of the README belongs to a section whose blocks some test runs as written.

The tests that run the blocks find them by their section's heading (``readme.split("## Scale out")``), so a
block added under a heading no test reads, or a heading renamed away from its test, fails here instead of
going untested. The set-up block is what CI itself runs (``.ci/run`` calls ``make test``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_BY_CI = {"Set up and test"}


def sections_with_blocks() -> dict[str, list[str]]:
    """Each ``## heading`` of the README with the languages of its fenced blocks, in order."""
    found: dict[str, list[str]] = {}
    heading, inside = None, False
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            if not inside:
                found.setdefault(heading, []).append(line[3:].strip())
            inside = not inside
        elif line.startswith("## ") and not inside:
            heading = line[3:]
    return found


def test_every_readme_block_is_run_by_a_test():
    tests = "\n".join(
        p.read_text() for p in (ROOT / "tests").glob("test_*.py") if p.name != Path(__file__).name
    )
    blocks = sections_with_blocks()
    assert None not in blocks, "a code block before the first section"
    # what the tests split the README on: "## Scale out", or readme_blocks("Snapshot training ...")
    read = {m for m in re.findall(r'"## ([^"{]{6,})"', tests)} | set(
        re.findall(r'readme_blocks\("([^"]+)"', tests)
    )
    untested = []
    for heading, langs in blocks.items():
        assert all(lang in ("python", "bash") for lang in langs), (heading, langs)
        if not any(heading.startswith(key) for key in read | RUN_BY_CI):
            untested.append(heading)
    assert not untested, f"README sections whose blocks no test reads: {untested}"
    assert len(blocks) >= 10  # the parser found the sections
