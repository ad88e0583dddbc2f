"""The `riffd` command line: one module per command group, each with a `register(subcommands)`.

`cli` builds the parser and holds `main`; `arguments` is what commands take (the parser class,
argument types, the transcripts PATH names), `output` what they give back (exit codes, JSON,
progress); `config_loading` loads the configuration for a command; `advice` the command `fix`,
`backups restore` and `archive restore` name when only the quiet period holds a file back. The
groups: `scan`, `fix` (its results rendered by `fix_output`), `ack`, `show`, `sessions`, `export`,
`backups`, `daemon` (`run`, `report`, `status`), `config`, `service`, `hook`, `mcp_setup` (`riffd
mcp` and registering it with Claude Code), and `archive` with `archive_ingest`, `archive_restore`
(what it writes: `restore_items`), `archive_search`, `archive_stats`, `archive_verify` and `archive_open` (opening
the archive for a command).
Commands may import everything else in riffd below them; only the MCP server (`riffd.mcp_server`,
which answers with what commands show) and the console script's front door (`riffd.entry`) import a
command module.
"""
