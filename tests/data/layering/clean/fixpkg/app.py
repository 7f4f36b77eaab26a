"""Layer 3: presentation."""
from fixpkg import core
from fixpkg.sub import grow


class Proxy:
    def __getattr__(self, name):  # a class __getattr__ is fine
        return name


def main():
    return core.load("x"), grow(1)
