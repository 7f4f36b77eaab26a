"""Static layering check of a Python package (used by ``tests/test_layering.py``).

Every import of every ``.py`` file of a package (module level, inside functions, under
``if TYPE_CHECKING:``) is resolved to the deepest module of that package it names; imports of
other packages are ignored.  The edges are checked against a layer map read from a markdown
table: no import of a higher layer, no import cycle, no dynamic import and no lazy module
``__getattr__``.  Nothing here imports the scanned package.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

LAYER_HEADING = "## Layer map"
LAYER_HEADER = ["module", "layer", "what it is"]
MAX_LAYER = 5
_DYNAMIC = {"import_module", "__import__"}


class Edge(NamedTuple):
    """One import: module ``src`` imports module ``dst`` at ``file:lineno``."""

    src: str
    dst: str
    file: str
    lineno: int


def read_layer_map(md_path) -> dict[str, int]:
    """Read the layer map table that follows the ``## Layer map`` heading of a markdown file.

    Parameters
    ----------
    md_path : str or Path
        Markdown file.  After the heading line ``## Layer map`` and optional prose lines comes a
        table whose header row is ``| module | layer | what it is |``, then a separator row
        (``|---|---|---|``), then one row per module: the module name in backticks, an integer
        layer 0..5 and a description.  The table ends at the first line not starting with ``|``.

    Returns
    -------
    dict of str to int
        Module name -> layer.

    Raises
    ------
    ValueError
        No such heading or table, a malformed row, a layer out of range or a duplicate module;
        the message gives the line number.
    """
    lines = Path(md_path).read_text(encoding="utf-8").splitlines()
    where = Path(md_path).name
    try:
        i = [ln.rstrip() for ln in lines].index(LAYER_HEADING) + 1
    except ValueError:
        raise ValueError(f"{where}: no '{LAYER_HEADING}' heading line") from None
    while i < len(lines) and not lines[i].lstrip().startswith("|"):
        if lines[i].startswith("#"):
            break
        i += 1
    if i >= len(lines) or _cells(lines[i]) != LAYER_HEADER:
        raise ValueError(f"{where}:{i + 1}: expected the table header '| module | layer | what it is |' "
                         f"after '{LAYER_HEADING}'")
    sep = _cells(lines[i + 1]) if i + 1 < len(lines) else []
    if len(sep) != len(LAYER_HEADER) or not all(re.fullmatch(r":?-+:?", c) for c in sep):
        raise ValueError(f"{where}:{i + 2}: expected the table separator row '|---|---|---|'")
    layers: dict[str, int] = {}
    for n in range(i + 2, len(lines)):
        if not lines[n].lstrip().startswith("|"):
            break
        cells = _cells(lines[n])
        name = re.fullmatch(r"`([A-Za-z_][\w.]*)`", cells[0]) if len(cells) == len(LAYER_HEADER) else None
        if name is None or not re.fullmatch(r"\d+", cells[1]) or int(cells[1]) > MAX_LAYER:
            raise ValueError(f"{where}:{n + 1}: expected '| `module` | <layer 0..{MAX_LAYER}> | text |', "
                             f"got {lines[n].strip()!r}")
        if name[1] in layers:
            raise ValueError(f"{where}:{n + 1}: module {name[1]} listed twice")
        layers[name[1]] = int(cells[1])
    return layers


def _cells(line: str) -> list[str]:
    """Stripped cells of a markdown table row (``\\|`` inside a cell is not a separator)."""
    parts = re.split(r"(?<!\\)\|", line.strip())
    return [c.strip() for c in parts[1:-1]] if len(parts) >= 3 else []


def package_modules(package_dir) -> dict[str, Path]:
    """Module name -> file of every ``.py`` file under ``package_dir`` (``__init__`` = the package)."""
    root = Path(package_dir).resolve()
    mods = {}
    for f in sorted(root.rglob("*.py")):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = f
    return mods


def _parse(path: Path, root: Path) -> tuple[ast.Module, str]:
    """Syntax tree of a module file and its path relative to the package's parent directory."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return tree, path.relative_to(root.parent).as_posix()


def _targets(node: ast.Import | ast.ImportFrom, cur: str, mods: dict[str, Path]) -> list[str]:
    """Package modules named by one import statement of module ``cur`` (deepest existing ones)."""
    def deepest(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    if isinstance(node, ast.Import):
        return [deepest(a.name) for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = cur.split(".") if mods[cur].name == "__init__.py" else cur.split(".")[:-1]
        if node.level - 1 >= len(pkg):
            return []  # relative import above the top package
        base = ".".join(pkg[: len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else deepest(base) for a in node.names]


def import_edges(package_dir) -> list[Edge]:
    """Every import edge between modules of the package, one per imported module per statement.

    Parameters
    ----------
    package_dir : str or Path
        Directory of the top package (its name is the package name).

    Returns
    -------
    list of Edge
        Sorted by file and line; self-imports and imports of other packages are left out.
    """
    root = Path(package_dir).resolve()
    mods = package_modules(root)
    edges = set()
    for cur, path in mods.items():
        tree, rel = _parse(path, root)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= {Edge(cur, dst, rel, node.lineno) for dst in _targets(node, cur, mods)
                          if dst is not None and dst != cur}
    return sorted(edges, key=lambda e: (e.file, e.lineno, e.dst))


def dynamic_imports(package_dir) -> list[str]:
    """Dynamic imports and lazy module ``__getattr__`` in the package, as violation strings.

    Flagged: ``import_module(...)`` / ``importlib.import_module(...)`` / ``__import__(...)`` whose
    name is a string constant naming a module of the package (absolute, or relative starting with
    ``.``) or is not a constant at all (cannot be checked), and a ``__getattr__`` defined or
    assigned at module level (PEP 562 lazy re-export).
    """
    root = Path(package_dir).resolve()
    pkg, out = root.name, []
    for path in package_modules(root).values():
        tree, rel = _parse(path, root)
        for node in ast.walk(tree):
            f = node.func if isinstance(node, ast.Call) else None
            fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if fname not in _DYNAMIC:
                continue
            names = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "name")]
            arg = names[0] if names else None
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                msg = f"dynamic import {fname}() with a non-constant name (cannot be checked statically)"
                out.append((rel, node.lineno, msg))
            elif arg.value == pkg or arg.value.startswith((pkg + ".", ".")):
                out.append((rel, node.lineno, f"dynamic import {fname}({arg.value!r}) of a package module"))
        out += [(rel, node.lineno, "module-level __getattr__ (lazy re-export)")
                for node in _module_level(tree.body) if "__getattr__" in _bound_names(node)]
    return [f"{rel}:{line}: {msg}" for rel, line, msg in sorted(out)]


def _module_level(body: list[ast.stmt]):
    """Statements run at module level: ``body`` and the blocks of its if/try/with/for/while."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for field in ("body", "orelse", "finalbody"):
                yield from _module_level(getattr(node, field, []))
            for h in getattr(node, "handlers", []):
                yield from _module_level(h.body)


def _bound_names(node: ast.stmt) -> set[str]:
    """Names a statement binds in its own scope (def, class, import, assignment targets)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).partition(".")[0] for a in node.names}
    targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
    return {n.id for t in targets if isinstance(t, ast.AST) for n in ast.walk(t)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components with more than one module (iterative Tarjan), sorted."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.src, set()).add(e.dst)
        graph.setdefault(e.dst, set())
    index, low, stack, on, out, work = {}, {}, [], set(), [], []

    def push(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        work.append((v, iter(sorted(graph[v]))))

    for start in sorted(graph):
        if start not in index:
            push(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:  # v done: pass its low-link up, pop its component if it is a root
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while not comp or comp[-1] != v:
                        comp.append(stack.pop())
                        on.discard(comp[-1])
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                push(w)
            elif w in on:
                low[v] = min(low[v], index[w])
    return sorted(out)


def check(package_dir, layer_map: dict[str, int]) -> list[str]:
    """All layering violations of a package against a layer map (empty list = clean).

    Parameters
    ----------
    package_dir : str or Path
        Directory of the top package.
    layer_map : dict of str to int
        Module -> layer, e.g. from :func:`read_layer_map`.

    Returns
    -------
    list of str
        Modules missing from the map, stale map entries, upward imports
        (``file:line: a -> b (layer X -> layer Y)``), import cycles, dynamic imports.
    """
    root = Path(package_dir).resolve()
    mods = package_modules(root)
    out = [f"module {m} ({mods[m].relative_to(root.parent).as_posix()}) is missing from the layer map"
           for m in mods if m not in layer_map]
    out += [f"layer map entry {m} has no module file (stale map)" for m in sorted(layer_map) if m not in mods]
    first: dict[tuple[str, str], Edge] = {}
    for e in import_edges(root):  # sorted by file and line: the first import of each pair
        first.setdefault((e.src, e.dst), e)
    for e in first.values():
        a, b = layer_map.get(e.src), layer_map.get(e.dst)
        if a is not None and b is not None and b > a:
            hint = " (the top package __init__)" if e.dst == root.name else ""
            out.append(f"{e.file}:{e.lineno}: upward import {e.src} -> {e.dst}{hint} "
                       f"(layer {a} -> layer {b})")
    for comp in cycles(list(first.values())):
        inner = sorted(f"{e.src} -> {e.dst} ({e.file}:{e.lineno})" for e in first.values()
                       if e.src in comp and e.dst in comp)
        out.append(f"import cycle among {', '.join(comp)}: " + "; ".join(inner))
    return out + dynamic_imports(root)
