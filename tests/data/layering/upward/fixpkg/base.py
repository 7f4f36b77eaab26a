from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fixpkg.top import T


def f(t: T) -> int:
    return 0
