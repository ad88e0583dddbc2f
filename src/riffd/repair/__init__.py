"""Repair: the smallest edit that fixes a transcript, and the one place that rewrites transcripts.

`plan` describes line edits and `line_edit` edits one line; `planner` chooses what to change from
an index (the damage in lines and links by `line_damage`, a lost parent guessed by `repoint`) and
`edits` turns that into line edits (pure). `writer` applies a plan (idle sessions
only, after a verified `backup`, by atomic swap): it makes the repaired `copy` and puts it in place
(`swap`); after the swap the `journal`, the `handover` with its exact `carry` of late `lines`,
`finish` (the repair's own look) and `recovery` (what a killed run left) settle it, and `failures`
says what happened when a step failed, once it has looked. `restore` puts a backup back the same
way, into folders `folders` checks (never through a symlinked one); `locks` holds the
per-transcript lock and riffd's temp files, `outcomes` the typed results users see. It imports the
transcript model and the shared seams, never the archive, the daemon or the commands.
"""
