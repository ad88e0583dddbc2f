"""The daemon's health report: `model` holds it as typed values (frozen dataclasses), `build`
makes one from the state store and the daemon's figures (`attention` sorts the findings out, each
with the advice that deals with it at that moment), and one module per format renders it:
`json` (schema 1), `markdown`, `html` (with the hourly history and the recent repairs; its charts:
`charts`) and
`prometheus`. `publish` writes the files (`report-<time>.json`, `latest.json`, `latest.md`,
`latest.html`, `metrics.prom`) and reads the last one back. It imports the state store and the
transcript model, never the daemon or the commands.
"""
