from . import base


def version():
    from fixpkg import VERSION  # not a submodule: an edge to the top package
    return VERSION, base
