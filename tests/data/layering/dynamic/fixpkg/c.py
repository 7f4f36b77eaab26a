from . import b


def _lazy(name):
    return getattr(b, name)


if b.B:
    __getattr__, __dir__ = _lazy, list  # assigned (as lazy_reexports() returns), under an if
