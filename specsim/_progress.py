"""Progress bars for long jobs (layer 0, foundations): tqdm on stderr where it is installed (extra
``specsim[vllm]``), else a silent stand-in with the same ``update`` / ``set_postfix_str`` / ``close``."""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress"]


class _Silent:
    """Stand-in for a tqdm bar when tqdm is not installed: every call does nothing."""

    def update(self, n: int = 1) -> None: ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> "_Silent":
        return self

    def __exit__(self, *exc: Any) -> None: ...


def progress(total: int, desc: str, *, enabled: bool = True) -> Any:
    """A progress bar of ``total`` steps on stderr (``tqdm.tqdm``), or a silent stand-in when tqdm is
    missing or ``enabled`` is False.  Use as a context manager; call ``.update()`` per finished step."""
    if not enabled:
        return _Silent()
    try:
        from tqdm import tqdm
    except ModuleNotFoundError:
        return _Silent()
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)
