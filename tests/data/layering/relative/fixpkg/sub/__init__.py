from .m import g
