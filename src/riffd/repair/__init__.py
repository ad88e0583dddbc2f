"""Repair: the smallest edit that fixes a transcript, and the one place that rewrites transcripts.

`plan` describes line edits, `planner` chooses them from an index (pure), `writer` applies a plan
(idle sessions only, after a verified `backup`, by atomic replace), `restore` puts a backup back the
same way (into folders `folders` checks: never through a symlinked one), `locks` holds the
per-transcript lock and riffd's temp files, `outcomes` the typed results users see. It imports the
transcript model and the shared seams (`riffd.fsio`, `riffd.paths`), never the archive, the daemon
or the commands.
"""
