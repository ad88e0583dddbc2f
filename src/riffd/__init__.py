"""riffd: keeps Claude Code session transcripts healthy and preserved."""

__version__ = "0.1.0"
