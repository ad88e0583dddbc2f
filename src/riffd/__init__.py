"""riffd: keeps Claude Code session transcripts healthy and preserved.

The subsystems are subpackages, each importing only from the layers below it: `commands`, `daemon`,
then `repair`, `archive`, `tracker` and `config` (which do not import each other), then
`transcript`, then `paths`, then the shared seams `fsio`, `database` and `logs` (README.md,
"Layout"). This module holds only the version.
"""

__version__ = "0.1.0"
