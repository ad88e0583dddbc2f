"""riffd: keeps Claude Code session transcripts healthy and preserved.

The subsystems are subpackages, each importing only those below it: `commands`, `daemon`, then `repair`,
`archive`, `tracker` and `config`, then `transcript`, then the shared seams `fsio`, `database`, `paths` and `logs`
(README.md, "Layout"). This module holds only the version.
"""

__version__ = "0.1.0"
