"""What a non-editable install ships: ``pip install .`` (the Docker image, a wheel) installs only the packages
``pyproject.toml`` lists, so a package folder missing from the list works in the editable checkout and the
tests, yet is absent from the image (``streamgnn.embeddings`` once was)."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _listed() -> tuple[set[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"]), config["package-dir"]


def test_every_package_folder_is_listed_for_install():
    listed, dirs = _listed()
    found = set()
    for name, folder in dirs.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            if ".venv" in init.parts or "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(base).parts
            found.add(".".join((name, *rel)))
    missing, extra = sorted(found - listed), sorted(listed - found)
    assert not missing, f"package folders pyproject.toml does not install: {missing}"
    assert not extra, f"pyproject.toml lists packages with no folder: {extra}"


def test_the_import_contracts_see_every_installed_package():
    """lint-imports reads one folder per package, the root package's: a package installed from another
    folder (``package-dir``: connectors/, benchmarks/) is seen only through a link to that folder under
    streamgnn/, and a package no layer names is free of the layers; either way its imports would escape
    the contracts (the layers, the broker clients kept inside the connectors)."""
    listed, dirs = _listed()
    root = ROOT / dirs["streamgnn"]
    for name, folder in dirs.items():
        seen = root.joinpath(*name.split(".")[1:])
        assert seen.resolve() == (ROOT / folder).resolve(), f"{name} ({folder}/) is not under {root.name}/"
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    named = {part.strip() for layer in layers for part in layer.split(":")}
    top = {name.split(".")[1] for name in listed if name.count(".") == 1}
    top |= {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    assert top <= named, f"in no layer of pyproject.toml's contract: {sorted(top - named)}"
