from fixpkg import base
from fixpkg.b import helper


def run():
    return helper(base.X)
