"""Test helper: a digest of the recorded runs, to assert that something left them untouched."""
from __future__ import annotations

import hashlib
from pathlib import Path


def tree_hash(root: Path) -> dict[str, str]:
    """sha256 of every file of every completed run directory (``.tmp-*`` runs in progress skipped)."""
    out = {}
    for d in sorted(root.iterdir()):
        if d.name.startswith("."):
            continue
        for p in sorted(d.rglob("*")) if d.is_dir() else [d]:
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def unchanged(before: dict[str, str], after: dict[str, str]) -> bool:
    """Every file recorded before is still there, byte for byte (runs recorded meanwhile by the
    runner may add files; none may change or vanish)."""
    return all(after.get(k) == v for k, v in before.items())
