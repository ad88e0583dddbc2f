"""The archive: every line of every transcript and every file of a session kept, deduplicated,
compressed, searchable.

`store` is the database (files, generations, exactly-once feeding, restore), `packs` the compressed
packs that hold the lines, `pieces` the content pieces cut out when seen before, `search` the
full-text search, `wholefiles` the other files of a session kept whole (saved outputs, checkpoints,
...) and `holdings` what it holds of each session. It imports only the transcript model; repair, the
daemon and the commands use it.
"""
