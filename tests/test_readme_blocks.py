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


def blocks_in_order() -> list[tuple[str, str]]:
    """``(heading, code)`` of every fenced block of the README, in document order."""
    found, heading, code = [], None, None
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            if code is None:
                code = []
            else:
                found.append((heading, "\n".join(code)))
                code = None
        elif code is not None:
            code.append(line)
        elif line.startswith("## "):
            heading = line[3:]
    return found


# What README blocks write to the shared broker and folder, each as (topic, partitions, dataset) or a folder.
_WRITES = [
    (r'produce_dataset\(\s*"localhost:9092", "([^"]+)", "([^"]+)", partitions=(\d+)', ("topic", "data", "n")),
    (r'create_topic\("localhost:9092", "([^"]+)", partitions=(\d+)', ("topic", "n")),
    (r"streamgnn produce (\S+) --bootstrap localhost:9092 --topic (\S+)", ("data", "topic")),
    (r"--out-topic (\S+) --partitions (\d+)", ("topic", "n")),
    (r'PartitionRouter\(\s*"localhost:9092", "[^"]+", "([^"]+)", (\d+)', ("topic", "n")),
]
_FOLDERS = r'(?:checkpoint_dir=|\.save\(|--checkpoint(?:-dir)? )"?([\w./-]+?)/?"?[,) \n]'


def test_readme_blocks_run_in_order_share_no_topic_or_folder():
    """Followed top to bottom against one broker in one folder, no block recreates a topic with another
    partition count, writes another dataset into a topic an earlier block filled, or checkpoints into a
    folder another section uses (each of these made the README's blocks clash when run in order)."""
    topics: dict[str, dict] = {}
    folders: dict[str, str] = {}
    for heading, code in blocks_in_order():
        for pattern, names in _WRITES:
            for match in re.finditer(pattern, code):
                found = dict(zip(names, match.groups(), strict=True))
                seen = topics.setdefault(found["topic"], {"where": heading})
                for key in ("n", "data"):
                    if key in found:
                        assert seen.setdefault(key, found[key]) == found[key], (found, seen, heading)
        for folder in re.findall(_FOLDERS, code):
            assert folders.setdefault(folder, heading) == heading, (folder, folders[folder], heading)
    assert {"events", "raw", "college-raw", "ratings"} <= set(topics)  # the patterns read the blocks
    assert {"ckpt", "store-ckpt", "hdrf-ckpt", "router-ckpt"} <= set(folders), folders
