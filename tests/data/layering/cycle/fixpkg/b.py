from . import base


def helper(x):
    from .a import run  # function-level import closes the cycle
    return run if x else base
