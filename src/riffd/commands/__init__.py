"""The `riffd` command line: one module per command group, each with a `register(subcommands)`.

`cli` builds the parser and holds `main`; `common` the exit codes, the parser class and helpers
every command uses. Commands may import everything else in riffd; nothing outside this package
imports a command module (the console script's front door, `riffd.entry`, aside).
"""
