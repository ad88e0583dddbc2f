"""The archive: every line of every transcript and every file of a session kept, deduplicated,
compressed, searchable.

`store` is the face the rest of riffd opens (`Archive`): a `writer` and a reader (`reading`) over
one `connection` (the SQLite connection, its lock and the packs held in memory), the writer adding
lines exactly once, generation by generation, and the reader giving them back (restore, sessions,
search, stats); `schema` makes and opens the database; `packs` are the compressed packs that hold
the lines, `dedup` cuts out of a line the pieces of content the archive holds already and `contents`
finds and keys those pieces; `search` is the full-text search, its snippets read by `spans`, a
filtered one looking only where `textspans` says its files' texts lie; `ingest` back-fills from
transcripts (with its reader process), `generation` judging whether a file still holds the
generation archived of it; `verify` compares the archive with the files and `recover` copies what is
readable of a damaged archive; `wholefiles` keeps a session's other files whole (saved outputs,
checkpoints, ...), every version, their bytes in content-addressed `blobs` (stored fast, then
compressed again once quiet by `blobcompact`), `versions` reads them back, and `holdings` says what
it holds of each session. It imports only the transcript model and `riffd.claude_code`; repair, the
daemon and the commands use it.
"""
