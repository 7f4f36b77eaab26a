"""Layer 1 inside a layer-2 subpackage."""
from ..errors import FixError


def grow(x):
    from fixpkg.errors import dumps  # function-level import
    if x < 0:
        raise FixError(dumps(x))
    return x + 1
