"""One save/restore vocabulary across the library, checked on every ``make test`` (issue 34).

The vocabulary (``streamgnn.checkpoint``'s docstring, ``docs/checkpoints.md``): ``state()`` gives plain
data, the classmethod ``from_state`` builds a new object from it, ``load_state`` loads it in place into an
object others hold by reference, torch state keeps ``state_dict``/``load_state_dict``. The check reads the
source of ``streamgnn/`` and ``connectors/`` with ``ast`` (no import) and fails on the names it replaced, on
state copied by ``vars(...).update``/``__dict__.update``, and on a ``from_state`` that is not a classmethod
or a ``load_state`` outside the classes named in ``IN_PLACE``, each with the reason it cannot be rebuilt.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("streamgnn", "connectors")

# the names the vocabulary replaced: a definition or a call of one fails
RETIRED = {
    "tensor_state": "SnapshotStream.state() with checkpoint.as_tensors",
    "from_tensor_state": "SnapshotStream.from_state with checkpoint.as_arrays",
    "inner_state": "RecurrentCell.state",
    "load_inner_state": "RecurrentCell.load_state",
    "stream_state": "LinkModel.state",
    "load_stream_state": "LinkModel.load_state",
    "restore_stream_tensors": "train.checkpoint.load_stream_tensors",
    "restore_batcher": "GlobalBatcher.from_state",
    "capture_rng": "checkpoint.rng_state",
    "restore_rng": "checkpoint.load_rng_state",
}

# the classes that load state in place (``load_state``), and why a new object from ``from_state`` would not do
IN_PLACE: dict[str, str] = {
    "LinkModel": "the protocol: a trainer builds its model, and its step and the offline run hold it",
    "TGNLinkModel": "a LinkModel",
    "DyGFormerLinkModel": "a LinkModel",
    "TPNetLinkModel": "a LinkModel",
    "EdgeBank": "a LinkModel",
    "RankState": "the protocol: a model's sharded backends make it and hold it",
    "TGNShardState": "a RankState",
    "OwnedMemory": "TGN's embedder over the shards holds the rank's rows",
    "HaloCache": "TGN's embedder over the shards holds the halo rows",
    "GlobalIndex": "a sharded trainer's parts (pair features, baselines, rank states) hold the index",
    "RecurrentCell": "it wraps the caller's layer, which the snapshot trainer's model holds",
    "LabelledStream": "the trainer (attached) and the metrics' gauges hold it; its feed is this run's",
    "JointHead": "the labelled stream and the offline labels feeding the step hold it; it holds the model",
}


def _trees():
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if not path.is_symlink() and not any(p.is_symlink() for p in path.parents if ROOT in p.parents):
                rel = path.relative_to(ROOT).as_posix()
                yield rel, ast.parse(path.read_text(), rel)


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    return {d.id for d in node.decorator_list if isinstance(d, ast.Name)}


def _copies_vars(call: ast.Call) -> bool:
    """``vars(x).update(...)`` or ``x.__dict__.update(...)``: one object's state copied into another's."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr == "update"):
        return False
    target = f.value
    if isinstance(target, ast.Call) and isinstance(target.func, ast.Name) and target.func.id == "vars":
        return True
    return isinstance(target, ast.Attribute) and target.attr == "__dict__"


def problems() -> list[str]:
    """Every place the vocabulary is broken, as ``path:line: what``."""
    out = []
    for rel, tree in _trees():
        classes = {}  # a def's line -> the class it is a method of
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        classes[item.lineno] = node.name
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name, owner = node.name, classes.get(node.lineno)
                if name in RETIRED:
                    out.append(f"{where}: {name} is retired: {RETIRED[name]}")
                elif name == "restore" or name.startswith(("restore_", "_restore")):
                    out.append(f"{where}: {name}: load in place with load_state, or build with from_state")
                elif name == "from_state" and (owner is None or "classmethod" not in _decorators(node)):
                    out.append(f"{where}: from_state builds a new object: a classmethod")
                elif name == "load_state" and owner not in IN_PLACE:
                    out.append(f"{where}: load_state in {owner or 'a module'}, which IN_PLACE does not name")
                elif name == "load_state" and _decorators(node) & {"classmethod", "staticmethod"}:
                    out.append(f"{where}: load_state loads into the object: a plain method")
            elif isinstance(node, ast.Call):
                f = node.func
                called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if called in RETIRED:
                    out.append(f"{where}: a call of {called}, which is retired: {RETIRED[called]}")
                if _copies_vars(node):
                    out.append(f"{where}: state copied with vars()/__dict__: give the class a load_state")
    return out


def test_state_is_saved_and_restored_by_one_vocabulary():
    assert problems() == []


def test_every_in_place_class_is_there_and_loads_in_place():
    """Each class ``IN_PLACE`` names defines ``load_state``: the list is the library's, not a stale one."""
    defining = set()
    for _, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(i, ast.FunctionDef) and i.name == "load_state" for i in node.body
            ):
                defining.add(node.name)
    assert set(IN_PLACE) == defining


def test_the_check_finds_each_kind_of_break(tmp_path, monkeypatch):
    """The check is not vacuous: a module with each break, scanned as if it were the library's."""
    bad = tmp_path / "streamgnn" / "bad.py"
    bad.parent.mkdir()
    bad.write_text(
        "class Part:\n"
        "    def stream_state(self): ...\n"
        "    def restore(self, state): ...\n"
        "    def from_state(self, state): ...\n"
        "    def load_state(self, state): ...\n"
        "    def copy(self, other):\n"
        "        vars(self).update(vars(other))\n"
        "        self.__dict__.update(other.__dict__)\n"
        "        other.tensor_state()\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = [p.split(": ", 1)[1] for p in problems()]
    assert len(found) == 7, found
    assert found[0].startswith("stream_state is retired") and found[1].startswith("restore:")
    assert "classmethod" in found[2] and "IN_PLACE does not name" in found[3]
    assert sum("vars()/__dict__" in f for f in found) == 2 and any("tensor_state" in f for f in found)
