"""The wheel's package list names every package of the checkout (runs in the regular suite: the
wheel itself is built only under -m packaging, and a package missing from the list would install
an app that fails at its first import of it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_in_the_wheel():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = config["package-dir"]  # import name -> folder
    found = set()
    for name, folder in mapped.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *relative.parts]))
    assert found - listed == set(), "packages missing from pyproject.toml's list"
    assert {p for p in listed if not p.startswith("specdec_studio.resources.")} <= found
