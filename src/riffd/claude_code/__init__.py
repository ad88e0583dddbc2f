"""What riffd knows of Claude Code itself, at the bottom of the house: its folders and which files in
them are transcripts (`folders`), walking the roots for them, symlinked folders followed once
(`walk`), the project-folder naming rule (`projects`), which other files belong to a session, by
where they are (`session_files`), the registry of running sessions (`registry`), where a
transcript's last lines say they were written (`written`) and whether a session is live
(`liveness`), its `settings.json` as riffd reads it (`settings`), and the MCP servers its user
configuration (`~/.claude.json`) registers (`user_config`). It imports only the shared seams
(`riffd.fsio`).
"""
