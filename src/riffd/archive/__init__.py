"""The archive: every line of every transcript and every file of a session kept, deduplicated,
compressed, searchable.

`schema` makes and opens the database; `store` writes lines into it (files, generations,
exactly-once feeding) and `reading` reads them back (restore, sessions); `packs` are the compressed
packs that hold the lines and `contents` the pieces of content cut out when seen before; `search` is
the full-text search; `ingest` back-fills from transcripts (with its reader process); `verify`
compares the archive with the files and `recover` copies what is readable of a damaged archive;
`wholefiles` keeps a session's other files whole (saved outputs, checkpoints, ...) and `holdings`
says what it holds of each session. It imports only the transcript model; repair, the daemon and
the commands use it.
"""
