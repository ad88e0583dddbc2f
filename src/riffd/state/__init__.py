"""The state store: what riffd knows of each transcript it watches and the running daemon's live
figures, in `<state dir>/state.db`. `store` is the store (`StateStore`: files, findings, repairs,
counters, history), `records` what it keeps of one file (watermark, state), `database` the file and
its schema, opened whole or healed. The daemon writes it; `riffd status` and the reports read it.
"""
