"""The README and the pages under ``docs/`` followed top to bottom, as a reader without Docker would: the
README's code blocks, then each page's, in the order of the README's "Where to go next" index, exactly as
written, in one working folder and against the one broker the README's "A broker without Docker" block starts
(``streamgnn broker &``).

Shell blocks run through ``bash -e -o pipefail``, Python blocks through the venv's ``python``, each in a fresh
process as a reader pastes it, with the venv activated (the README's first step) and
``OMP_WAIT_POLICY=passive`` (its advice for few cores). The working folder stands in for a fresh clone's root:
``.venv`` and ``examples/`` link to the checkout, and everything the blocks write lands in the folder. A block
marked ``<!-- not run: REASON -->`` on the line before its fence is skipped, and only those (the suite itself,
Docker); a ```text block is an illustration, never run. Where user namespaces allow it
(``unshare -rnpf --mount-proc``), the blocks run in private network and PID namespaces: the pages' own ports
(9092, 8000, 8443, torchrun's 29500) cannot clash with anything else on the host, and whatever the blocks left
running ends with the namespace. Elsewhere they run on the host's loopback, which then needs those ports
free."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = re.compile(r"<!-- not run: (.+?) -->")
CONTINUES = "<!-- continues the block above -->"
PORTS = (9092, 8000, 8443, 29500)
# a user, network, PID and mount namespace with its own /proc (MPI's shared memory finds its peers there)
UNSHARE = ["unshare", "-rnpf", "--mount-proc"]


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: the page, where it starts, its section, language and code, and why it is
    not run (None: it is)."""

    page: str
    line: int
    heading: str
    lang: str
    code: str
    skip: str | None

    @property
    def file(self) -> str:
        return "sh" if self.lang == "bash" else "py"

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.heading})"


RUN = ("python", "bash")  # the languages a block runs in; ```text marks an illustration
INDEX = "## Where to go next"
LINK = re.compile(r"\]\((docs/[\w-]+\.md)\)")


def pages() -> list[str]:
    """The README, then the pages its "Where to go next" index links, in the index's order. A page the
    index links may be missing (a page another branch adds); every page under docs/ must be linked, so none
    is left out of the run."""
    readme = (ROOT / "README.md").read_text()
    assert INDEX in readme, f"README.md has no {INDEX!r} section"
    linked = list(dict.fromkeys(LINK.findall(readme.split(INDEX, 1)[1])))
    present = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
    unlinked = set(present) - set(linked)
    assert not unlinked, f"pages not in README.md's {INDEX!r}, so never run in order: {sorted(unlinked)}"
    return ["README.md", *(page for page in linked if (ROOT / page).exists())]


def page_blocks(page: str) -> list[Block]:
    """Every fenced block of ``page``, in document order; a Python block marked as continuing the one above
    is joined to it (the reader runs both in one session)."""
    blocks, heading, start, lang, code = [], "", 0, "", None
    lines = (ROOT / page).read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            if code is None:
                start, lang, code = number, line[3:].strip(), []
            else:
                above = lines[start - 2].strip() if start > 1 else ""
                marker, text = SKIP.fullmatch(above), "\n".join(code) + "\n"
                assert lang in (*RUN, "text"), f"{page}:{start}: a ```{lang} block (run: {RUN}; else text)"
                if lang == "text":
                    assert not marker and above != CONTINUES, f"{page}:{start}: a text block is never run"
                elif above == CONTINUES:
                    last = blocks.pop()
                    assert (last.lang, last.skip) == (lang, None), f"{page}:{start} continues {last}"
                    blocks.append(Block(page, last.line, last.heading, lang, last.code + text, None))
                else:
                    blocks.append(Block(page, start, heading, lang, text, marker and marker[1]))
                code = None
        elif code is not None:
            code.append(line)
        elif line.startswith(("# ", "## ")):
            heading = line.split(" ", 1)[1]
    assert code is None, f"{page}:{start}: a block is never closed"
    return blocks


def readme_blocks() -> list[Block]:
    """The blocks of the README and then of each page, in the order a reader follows them."""
    return [block for page in pages() for block in page_blocks(page)]


def test_the_pages_run_in_the_index_order_and_only_marked_blocks_are_skipped():
    order = pages()
    assert order[0] == "README.md" and {"docs/kafka.md", "docs/training.md", "docs/serving.md"} <= set(order)
    assert order.index("docs/kafka.md") < order.index("docs/training.md") < order.index("docs/serving.md")
    blocks = readme_blocks()
    assert len(blocks) >= 15 and all(b.lang in RUN for b in blocks)
    # the README's broker comes first: every later block that talks to localhost:9092 needs it
    first = next(b for b in blocks if not b.skip)
    assert first.page == "README.md" and "streamgnn broker &" in first.code
    snapshots = [b for b in blocks if b.heading.startswith("Snapshot training")]
    assert len(snapshots) == 1 and "build_signal(store, spec" in snapshots[0].code  # joined: one session
    skipped = {b.heading: b.skip for b in blocks if b.skip}
    # the set-up block is how the suite itself runs (CI calls make test); the cluster needs Docker
    assert set(skipped) == {"Set up and test: two commands", "The docker-compose cluster"}, skipped
    assert all(len(reason) > 10 for reason in skipped.values())


# What README blocks write to the shared broker and folder, each as (topic, partitions, dataset) or a folder.
_WRITES = [
    (r'produce_dataset\(\s*"localhost:9092", "([^"]+)", "([^"]+)", partitions=(\d+)', ("topic", "data", "n")),
    (r'create_topic\("localhost:9092", "([^"]+)", partitions=(\d+)', ("topic", "n")),
    (r"streamgnn produce (\S+) --bootstrap localhost:9092 --topic (\S+)", ("data", "topic")),
    (r"--out-topic (\S+) --partitions (\d+)", ("topic", "n")),
    (r'PartitionRouter\(\s*"localhost:9092", "[^"]+", "([^"]+)", (\d+)', ("topic", "n")),
]
_FOLDERS = r'(?:checkpoint_dir=|\.save\(|--checkpoint(?:-dir)? |--out )"?([\w./-]+?)/?"?[,) \n]'


def test_readme_blocks_share_no_topic_or_folder():
    """Read top to bottom, no block recreates a topic with another partition count, writes another dataset
    into a topic an earlier block filled, or writes into a folder another section uses (each of these made
    the blocks clash when run in order; the run below would show it too, this names the clash)."""
    topics: dict[str, dict] = {}
    folders: dict[str, str] = {}
    for block in readme_blocks():
        for pattern, names in _WRITES:
            for match in re.finditer(pattern, block.code):
                found = dict(zip(names, match.groups(), strict=True))
                seen = topics.setdefault(found["topic"], {"where": block.heading})
                for key in ("n", "data"):
                    if key in found:
                        assert seen.setdefault(key, found[key]) == found[key], (found, seen, block.heading)
        for folder in re.findall(_FOLDERS, block.code):
            assert folders.setdefault(folder, block.heading) == block.heading, (
                folder,
                folders[folder],
                block,
            )
    assert {"events", "raw", "college-raw", "ratings"} <= set(topics)  # the patterns read the blocks
    assert {"ckpt", "store-ckpt", "hdrf-ckpt", "router-ckpt", "out/agents"} <= set(folders), folders


# Runs in the working folder; $1 is the folder of numbered blocks. Stops at the first block that fails.
DRIVER = r"""
set -u
if [ "${PRIVATE_NET:-0}" = 1 ]; then ip link set lo up || exit 90; fi
for block in $(ls "$1" | grep -E '^[0-9]+\.(sh|py)$' | sort -n); do
  date +%s > "$1/$block.start"
  case $block in
    *.sh) bash -e -o pipefail "$1/$block" ;;
    *.py) python "$1/probed.py" "$1/$block" ;;
  esac > "$1/$block.log" 2>&1 < /dev/null
  rc=$?
  echo "$rc" > "$1/$block.rc"
  [ "$rc" = 0 ] || break
done
"""


# A Python block runs as ``python BLOCK`` would run it (``runpy``, as ``__main__``, in a fresh process); then,
# if the test names a probe for it, the probe's expression is evaluated in the block's globals and written as
# JSON beside its log: what the block left in memory (the live store, the result), which no file records.
PROBED = r"""
import json, runpy, sys
from pathlib import Path

block = Path(sys.argv[1])
sys.argv = [str(block)]
scope = runpy.run_path(str(block), run_name="__main__")
probe = block.with_suffix(".probe")
if probe.exists():
    found = eval(probe.read_text(), scope)
    block.with_suffix(".probe.json").write_text(json.dumps(found))
"""

# (section heading's start, a line of the block, the probe's expression): what the block leaves in memory.
PROBES = [
    (
        "From Kafka",
        "produce_dataset(",
        """{
        "live": store.content_hash(), "num_edges": store.num_edges,
        "checkpointed": TemporalGraphStore.load("ckpt/").content_hash(),
        "stored_offsets": store.source_offsets, "read": source.positions(),
    }""",
    ),
    (
        "Train online",
        "run_online(",
        """{
        "events": result.events, "ap": result.metrics.ap, "mrr": result.metrics.mrr,
        "edgebank_mrr": result.baselines["edgebank"].mrr, "flags": result.flags,
    }""",
    ),
    ("Serve embeddings", "EmbeddingsReader(", """{"vectors": vectors.tolist(), "top": ids.tolist()}"""),
    (
        "Snapshot training",
        "run_live(",
        """{
        "scored": len(result.metrics), "snapshots": signal.snapshot_count, "train": train.snapshot_count,
        "auc": result.summary["online_auc"], "signal": type(signal).__name__,
        "test_mse": forecast.summary["test_mse"],
    }""",
    ),
]


def probe_for(block: Block) -> str | None:
    found = [p for h, line, p in PROBES if block.heading.startswith(h) and line in block.code]
    assert len(found) <= 1, block
    return found[0] if found else None


def answers(log: str, start: str) -> list:
    """The JSON objects in ``log`` (curl prints them back to back, between the service's own log lines)
    that begin with ``start``, e.g. ``{"dim"``."""
    decoder, out, at = json.JSONDecoder(), [], log.find(start)
    while at >= 0:
        value, end = decoder.raw_decode(log, at)
        out.append(value)
        at = log.find(start, end)
    return out


def private_namespace() -> bool:
    """Whether this host lets an unprivileged user open network and PID namespaces with a loopback."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        return False
    probe = subprocess.run([*UNSHARE, "ip", "link", "set", "lo", "up"], capture_output=True)
    return probe.returncode == 0


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def run_in_order(blocks: list[Block], numbered: Path, work: Path) -> tuple[dict[int, str], dict[str, dict]]:
    """Run ``blocks`` through the driver; the log of each, by index (a block that failed fails the test), and
    each probe's findings, by the heading of its section."""
    (numbered / "probed.py").write_text(PROBED)
    for index, block in enumerate(blocks):
        (numbered / f"{index}.{block.file}").write_text(block.code)
        if probe_for(block):
            (numbered / f"{index}.probe").write_text(probe_for(block))
    private = private_namespace()
    if not private and not all(port_free(p) for p in PORTS):
        pytest.skip(f"no private network namespace here, and one of the README's ports {PORTS} is taken")
    env = {
        **os.environ, "PATH": f"{Path(sys.prefix) / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": sys.prefix,
        "OMP_WAIT_POLICY": "passive", "PRIVATE_NET": str(int(private)),
    }  # fmt: skip
    cmd = ["bash", "-c", DRIVER, "driver", str(numbered)]
    proc = subprocess.Popen(
        [*UNSHARE, "--kill-child", *cmd] if private else cmd,
        cwd=work,
        env=env,
        start_new_session=True,
    )
    try:
        proc.wait(timeout=5400)  # a safety net for a hung block, twice the longest run seen
    finally:  # on the host, end whatever the blocks left running (in a namespace, its end did that)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"the driver itself failed ({proc.returncode})"
    logs = {}
    for index, block in enumerate(blocks):
        where = block.where
        rc = numbered / f"{index}.{block.file}.rc"
        assert rc.exists(), f"{where} never ran"
        logs[index] = (numbered / f"{index}.{block.file}.log").read_text()
        assert rc.read_text().strip() == "0", f"{where} failed:\n{logs[index][-4000:]}"
    probes = {
        block.heading: json.loads((numbered / f"{index}.probe.json").read_text())
        for index, block in enumerate(blocks)
        if probe_for(block)
    }
    return logs, probes


# about 40 minutes on a shared 2-core host at load 15 (the blocks' own work is a fraction of that): a safety
# net above the driver's own
@pytest.mark.timeout(5700)
def test_readme_blocks_run_in_document_order_against_one_broker(tmp_path):
    """Each block succeeds, and leaves what the README says it does."""
    from streamgnn.checkpoint import read_latest
    from streamgnn.store import TemporalGraphStore

    blocks = [b for b in readme_blocks() if not b.skip]
    work, numbered = tmp_path / "clone", tmp_path / "blocks"
    work.mkdir(), numbered.mkdir()
    (work / ".venv").symlink_to(sys.prefix)
    (work / "examples").symlink_to(ROOT / "examples")
    logs, probes = run_in_order(blocks, numbered, work)
    assert "listening on 127.0.0.1:9092" in logs[0]
    # The main job (README): trained on the topic's first 2,000 events, published, served over HTTP
    main = next(i for i, b in enumerate(blocks) if b.heading.startswith("The main job"))
    assert json.loads((work / "out/main/summary.json").read_text())["events"] == 2_000
    (first,) = answers(logs[main], '{"dim"')
    assert [e["id"] for e in first["embeddings"]] == [1, 2] and all(
        e["embedding"] for e in first["embeddings"]
    )
    # From Kafka: the whole topic in the store, its checkpoint equal to it, every message read recorded
    kafka = probes["From Kafka, with nothing lost"]
    assert kafka["num_edges"] == 157_474 and kafka["checkpointed"] == kafka["live"]
    assert kafka["stored_offsets"] == kafka["read"] and set(kafka["read"]) == {
        f"events:{p}" for p in range(4)
    }
    assert TemporalGraphStore.load(work / "ckpt").content_hash() == kafka["live"]
    # Train online: the head it was told to learn, above chance, EdgeBank beside it; plots and checkpoint
    online = probes["Train online, serve embeddings"]
    assert online["events"] == 5_000 and 0.5 < online["ap"] <= 1 and 0 < online["mrr"] <= 1, online
    assert 0 < online["edgebank_mrr"] <= 1 and all("loses to" in flag for flag in online["flags"])
    assert (work / "out/run/metrics.png").exists() and (work / "out/ckpt/LATEST").exists()
    # Serve: every reader of the topic answers the same vectors (HTTP, HTTPS with the token, a Python
    # reader), top-k and score answer in their form, the Prometheus line last
    served = probes["Serve embeddings over HTTP"]["vectors"]
    serve = next(
        logs[i] for i, b in enumerate(blocks) if "--port 8000 &" in b.code and b.page == "docs/serving.md"
    )
    (lookup,) = answers(serve, '{"dim"')
    assert [e["id"] for e in lookup["embeddings"]] == [1, 2]
    assert [e["embedding"] for e in lookup["embeddings"]] == served  # float32 rows, as JSON: exact
    (topk,) = answers(serve, '{"query"')
    assert topk["query"] == 1 and len(topk["neighbors"]) == 5
    assert [n["id"] for n in topk["neighbors"]] == probes["Serve embeddings over HTTP"]["top"][0]
    (score,) = answers(serve, '{"scorer"')
    assert score["scorer"] == "cosine" and "streamgnn_table_nodes " in serve
    tls = next(logs[i] for i, b in enumerate(blocks) if "--port 8443" in b.code)
    refused, answered = answers(tls, '{"error"') + answers(tls, '{"dim"')
    assert "Authorization: Bearer" in refused["error"]
    assert answered["embeddings"][0]["embedding"] == served[0]
    # Snapshots: each month but the last scored before it is learned; the offline signal PGT takes
    snap = probes["Snapshot training with PyTorch Geometric Temporal"]
    assert snap["scored"] == snap["snapshots"] == 63 and snap["train"] == 44, snap  # 64 months of OTC
    assert (
        0.5 < snap["auc"] <= 1
        and snap["signal"] == "DynamicGraphTemporalSignal"
        and 0 < snap["test_mse"] < 10
    )
    assert (work / "ratings.png").exists() and (work / "snapshot-ckpt/ratings/LATEST").exists()
    # Scale out: both sharded runs ended where the README says, each rank reading only its own partitions
    sharded = next(logs[i] for i, b in enumerate(blocks) if "--produce" in b.code)
    assert "produced 157,474 events into edges" in sharded and "4,000 events on 2 ranks" in sharded
    runs = (("out/train_sharded_kafka", 4000, "edges", 8), ("out/sharded-routed", 2000, "routed", 4))
    for folder, events, topic, partitions in runs:
        assert json.loads((work / folder / "summary.json").read_text())["events"] == events
        for rank in range(2):  # partitions go round-robin over the ranks
            root = work / folder / f"checkpoints/rank-{rank:05d}"
            manifest = json.loads((root / read_latest(root)[0] / "manifest.json").read_text())
            read = manifest["store"]["source_offsets"]  # the rank's store, in its trainer checkpoint
            assert set(read) == {f"{topic}:{p}" for p in range(rank, partitions, 2)}, (folder, rank, read)
    # Partitioning: the plot
    assert (work / "partition.png").exists()
    # Agents, Python: the metric named, accuracy well above chance without failures
    agents_py = next(
        logs[i] for i, b in enumerate(blocks) if b.heading.startswith("Agents") and b.lang == "python"
    )
    first, *rows = agents_py.strip().splitlines()
    assert first.startswith("test accuracy (the share of agents naming the source's community; chance 0.333")
    accuracy = {row.split(":")[0].strip(): float(row.rsplit(":", 1)[1]) for row in rows}
    assert len(accuracy) == 4 and accuracy["no failures"] > 2 / 3, accuracy  # twice chance (1 of 3)
    # Agents, commands: trained well above chance; 4 MPI ranks equal one process; a killed rank is failed
    local = json.loads((work / "out/agents/source_loc.json").read_text())
    mpi = json.loads((work / "out/agents-mpi/source_loc.json").read_text())
    assert mpi["ranks"] == 4 and local["ranks"] == 1
    assert len(mpi["verify"]) == 3 * 2 * 2 and all(mpi["verify"].values()), mpi["verify"]
    assert mpi["accuracy"] == local["accuracy"]  # the same seeded masks: the same accuracies, exactly
    assert local["chance"] == 0.25 and local["metric"].startswith("test accuracy")
    assert all(ys[0] > 2 * local["chance"] for table in local["accuracy"].values() for ys in table.values())
    assert not mpi["failed_ranks_seen"] and not mpi["unreported_ranks"]
    assert (work / "out/agents-mpi/source_loc.png").stat().st_size > 10_000
    killed = json.loads((work / "out/agents-kill/source_loc.json").read_text())
    assert killed["unreported_ranks"] == [2]  # rank 2 died, the others finished and reported
    seen = {int(r): f for r, f in killed["failed_ranks_seen"].items()}
    assert seen and all(f == [2] for f in seen.values())  # its neighbors treat it as failed, nobody else
    # The store and sampling blocks: their files
    assert (work / "store-ckpt/LATEST").exists() and (work / "eval_negatives/LATEST").exists()
