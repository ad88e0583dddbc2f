"""The archive: every line of every transcript kept, deduplicated, compressed and searchable.

`store` is the database (files, generations, exactly-once feeding, restore), `packs` the compressed packs that hold
the lines, `pieces` the content pieces cut out when seen before, `search` the full-text search. It imports only the
transcript reader; repair, the daemon and the commands use it.
"""
