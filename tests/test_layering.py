"""Layering of the specsim package: imports only go down the layer map of docs/architecture.md.

The scanner (``tests/layering_scan.py``) reads every import of every module with ``ast``; the
fixture packages under ``tests/data/layering/`` (scanned, never imported) show that each rule
can fail.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ is no package: any import mode
import layering_scan as ls

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specsim"
MAP = ROOT / "docs" / "architecture.md"
FIXTURES = Path(__file__).resolve().parent / "data" / "layering"


def _fixture(name: str) -> list[str]:
    """Violations of fixture package ``name`` against its own LAYERS.md."""
    return ls.check(FIXTURES / name / "fixpkg", ls.read_layer_map(FIXTURES / name / "LAYERS.md"))


# ---- specsim itself -------------------------------------------------------------------------

def test_specsim_layers_clean():
    violations = ls.check(PACKAGE, ls.read_layer_map(MAP))
    assert not violations, f"{len(violations)} layering violation(s):\n" + "\n".join(violations)


def test_specsim_scan_is_not_vacuous():
    modules = ls.package_modules(PACKAGE)
    files = {p for p in PACKAGE.rglob("*.py")}
    assert len(modules) == len(files) >= 20 and set(modules.values()) == files
    assert "specsim" in modules and "specsim.errors" in modules
    edges = ls.import_edges(PACKAGE)
    assert len(edges) > 50
    assert {e.src for e in edges} >= {"specsim", "specsim.predict"}


def test_specsim_map_covers_exactly_the_modules():
    assert set(ls.read_layer_map(MAP)) == set(ls.package_modules(PACKAGE))


# ---- the checker can fail ---------------------------------------------------------------------

def test_fixture_clean_has_no_violations():
    assert _fixture("clean") == []
    edges = {(e.src, e.dst) for e in ls.import_edges(FIXTURES / "clean" / "fixpkg")}
    assert edges == {
        ("fixpkg", "fixpkg.app"), ("fixpkg", "fixpkg.errors"),
        ("fixpkg.app", "fixpkg.core"), ("fixpkg.app", "fixpkg.sub"),
        ("fixpkg.core", "fixpkg.errors"),
        ("fixpkg.sub", "fixpkg.sub.leaf"),
        ("fixpkg.sub.leaf", "fixpkg.errors"),
    }


def test_fixture_cycle_within_one_layer():
    violations = _fixture("cycle")
    assert len(violations) == 1, violations
    assert violations[0].startswith("import cycle among fixpkg.a, fixpkg.b: ")
    assert "fixpkg.a -> fixpkg.b (fixpkg/a.py:2)" in violations[0]
    assert "fixpkg.b -> fixpkg.a (fixpkg/b.py:5)" in violations[0]  # the function-level import


def test_fixture_upward_import_under_type_checking_and_of_the_top_package():
    assert _fixture("upward") == [
        "fixpkg/base.py:6: upward import fixpkg.base -> fixpkg.top (layer 0 -> layer 2)",
        ("fixpkg/mid.py:5: upward import fixpkg.mid -> fixpkg (the top package __init__) "
         "(layer 1 -> layer 3)"),
    ]


def test_fixture_module_missing_from_map_and_stale_entry():
    assert _fixture("missing") == ["module fixpkg.extra (fixpkg/extra.py) is missing from the layer map"]
    layers = ls.read_layer_map(FIXTURES / "missing" / "LAYERS.md") | {"fixpkg.extra": 0, "fixpkg.gone": 1}
    assert ls.check(FIXTURES / "missing" / "fixpkg", layers) == [
        "layer map entry fixpkg.gone has no module file (stale map)"]


def test_fixture_dynamic_imports_and_module_getattr():
    assert _fixture("dynamic") == [
        "fixpkg/__init__.py:1: module-level __getattr__ (lazy re-export)",
        "fixpkg/a.py:6: dynamic import import_module('fixpkg.b') of a package module",
        "fixpkg/a.py:7: dynamic import import_module('.b') of a package module",
        ("fixpkg/a.py:8: dynamic import import_module() with a non-constant name "
         "(cannot be checked statically)"),
        "fixpkg/a.py:10: dynamic import __import__('fixpkg') of a package module",
        "fixpkg/c.py:9: module-level __getattr__ (lazy re-export)",
    ]


def test_fixture_relative_imports_resolve_to_the_deepest_module():
    assert ls.import_edges(FIXTURES / "relative" / "fixpkg") == [
        ls.Edge("fixpkg.sub", "fixpkg.sub.m", "fixpkg/sub/__init__.py", 1),
        ls.Edge("fixpkg.sub.m", "fixpkg.x.z", "fixpkg/sub/m.py", 2),      # import fixpkg.x.z
        ls.Edge("fixpkg.sub.m", "fixpkg.x.y", "fixpkg/sub/m.py", 3),      # from ..x import y (submodule)
        ls.Edge("fixpkg.sub.m", "fixpkg.x", "fixpkg/sub/m.py", 4),        # from ..x import Thing (a name)
        ls.Edge("fixpkg.sub.m", "fixpkg.x.z", "fixpkg/sub/m.py", 5),      # from ..x.z import f
        ls.Edge("fixpkg.sub.m", "fixpkg.sub.n", "fixpkg/sub/m.py", 6),    # from . import n
        ls.Edge("fixpkg.sub.m", "fixpkg", "fixpkg/sub/m.py", 7),          # from fixpkg import VERSION
        ls.Edge("fixpkg.x", "fixpkg.x.y", "fixpkg/x/__init__.py", 1),     # from .y import Thing
    ]
    assert _fixture("relative") == []


def test_cycles_finds_every_strongly_connected_component():
    edges = [ls.Edge(a, b, "f.py", 1) for a, b in
             [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "p.e"), ("p.e", "p.d"),
              ("p.f", "p.a")]]
    assert ls.cycles(edges) == [["p.a", "p.b", "p.c"], ["p.d", "p.e"]]


@pytest.mark.parametrize("text, message", [
    ("# no map here\n", "no '## Layer map' heading"),
    ("## Layer map\n\n| name | layer |\n|---|---|\n", "expected the table header"),
    ("## Layer map\n| module | layer | what it is |\n| `a` | 0 | x |\n", "separator row"),
    ("## Layer map\n| module | layer | what it is |\n|---|---|---|\n| `a` | 6 | x |\n", ":4: expected"),
    ("## Layer map\n| module | layer | what it is |\n|---|---|---|\n| a | 0 | x |\n", ":4: expected"),
    ("## Layer map\n| module | layer | what it is |\n|---|---|---|\n| `a` | 0 | x |\n| `a` | 1 | y |\n",
     "listed twice"),
])
def test_read_layer_map_rejects_malformed_tables(tmp_path, text, message):
    (tmp_path / "map.md").write_text(text)
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        ls.read_layer_map(tmp_path / "map.md")


def test_read_layer_map_reads_rows_until_the_table_ends(tmp_path):
    (tmp_path / "map.md").write_text(
        "# doc\n\n## Layer map\nsome prose\n\n| module | layer | what it is |\n| --- | :-: | --- |\n"
        "| `p.errors` | 0 | bad-input \\| data errors |\n| `p` | 5 | top |\n"
        "after\n| `p.late` | 1 | not in the table |\n")
    assert ls.read_layer_map(tmp_path / "map.md") == {"p.errors": 0, "p": 5}
