"""The daemon's health report: `build` gathers it from the state store and the daemon's figures,
`markdown`, `html` and `prometheus` render it, `publish` writes the files (`latest.json`,
`latest.md`, `latest.html`, `metrics.prom`) and reads the last one back. It imports the state
store and the transcript model, never the daemon or the commands.
"""
