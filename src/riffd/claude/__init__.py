"""What riffd puts into Claude Code: its hooks in a `settings.json` (`settings`) and the
SessionStart hook that warns before a resume damages a transcript (`session_start`)."""
