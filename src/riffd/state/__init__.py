"""The state store: what riffd knows of each transcript it watches (its watermark, findings,
repairs) and the running daemon's live figures, in `<state dir>/state.db` (`store`). The daemon
writes it; `riffd status` and the reports read it.
"""
