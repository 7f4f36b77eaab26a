"""Atomic file writing shared by every layer (layer 0, foundations): a file is written to a temporary
name beside its destination and renamed over it in one :func:`os.replace`, so readers see the old
file or the new one, never half of one.  Files are 0644 (``mkstemp`` creates 0600)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

__all__ = ["atomic_write", "atomic_write_json"]


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Write ``path`` atomically: ``write(tmp)`` fills a temporary file in the same directory, which then
    replaces ``path``.  The temporary file keeps ``path``'s suffix (writers that pick a format from it,
    e.g. matplotlib's ``savefig``, see the same name).  On any error the temporary file is removed and
    ``path`` is unchanged.

    Parameters
    ----------
    path : path-like
        Destination; its directory is created if missing.
    write : callable
        ``write(tmp_path)`` writes the whole content to ``tmp_path``.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".tmp-{path.stem}-", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any, **dump_kwargs: Any) -> Path:
    """:func:`atomic_write` of ``json.dump(obj, **dump_kwargs)`` followed by a newline."""
    def write(p: Path) -> None:
        with open(p, "w") as f:
            json.dump(obj, f, **dump_kwargs)
            f.write("\n")
    return atomic_write(path, write)
