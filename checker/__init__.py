"""History model, history I/O and the analyses that judge a lock history.

`checker` depends on no other package of the project: it runs on a history file alone.
"""
