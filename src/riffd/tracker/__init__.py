"""The tool-call tracker: tool calls that repeat a recent identical call.

`calls` holds the rules (which calls are the same), `tracker` the per-session memory the daemon
feeds. Standard library only: the PreToolUse hook (`riffd.hooks.pre_tool_use`) uses `calls` and
starts in a few milliseconds.
"""
