"""The tool-call tracker and its PreToolUse hook: tool calls that repeat a recent identical call.

`calls` holds the rules (which calls are the same), `tracker` the per-session memory the daemon
feeds, `hook` the hook Claude Code runs before every tool call. Standard library only, so the hook
starts in a few milliseconds: it imports nothing from the rest of riffd.
"""
