"""`riffd mcp`: a Model Context Protocol server on stdio that gives Claude Code riffd's memory,
built on the official SDK (`mcp` 1.x, the optional extra `riffd[mcp]`), which nothing else in riffd
imports.

`start` is where the console script's front door hands `riffd mcp` over (and says how to install
the SDK when it is missing); `server` registers the tools on FastMCP and serves them, with riffd's
failures as tool errors; `memory` holds the configuration and the archive and finds a session by a
full id, a unique prefix or `latest`; the tools: `lookup` (search, list_sessions), `conversation`
(read_session), `health` (session_health) and `restore` (restore_session), their typed answers in
`results`. A front end over the
commands, like the command line: it may import everything in riffd but `entry`.
"""
