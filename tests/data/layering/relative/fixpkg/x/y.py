class Thing:
    pass
