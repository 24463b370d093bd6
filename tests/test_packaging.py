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
