class T:
    pass
