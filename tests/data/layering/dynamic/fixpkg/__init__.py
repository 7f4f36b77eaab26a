def __getattr__(name):
    from . import b
    return getattr(b, name)
