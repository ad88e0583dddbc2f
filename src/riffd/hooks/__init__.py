"""The hooks Claude Code runs, and putting them into its settings: `pre_tool_use` (a tool call that
repeats a recent identical one), `session_start` (a resume that would write into a transcript
another process writes), `install` (adding and removing riffd's hooks in a `settings.json`) and
`checking` (whether the hook commands in a settings file run, as Claude Code runs them), and
`answer` (how a hook writes its answer, and says when it cannot). The two hooks run at every tool
call and every start of Claude Code: they import only the standard library, `riffd.claude_code.registry`,
`riffd.tracker.calls` and `riffd.hooks.answer`.
"""
