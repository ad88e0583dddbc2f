"""riffd: keeps Claude Code session transcripts healthy and preserved.

The subsystems are subpackages, each importing only from the layers below it (the docs' architecture
page): `entry` (the console script's front door) and `__main__`; `commands`; `daemon`; `reports`
and `hooks`; `repair`, `archive`, `tracker`, `config` and `state`; `transcript`; `claude_code`,
`paths` and `database`; and the shared seams `fsio`, `display`, `forking`, `logs` and `quickjson`
(JSON for the hooks, without importing `json`). This module holds only the version.
"""

__version__ = "0.3.0.dev0"
