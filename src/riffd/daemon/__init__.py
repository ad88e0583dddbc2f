"""The daemon (`riffd run`): watch the roots, keep findings current, repair idle sessions, archive,
report.

`runner` is the lifecycle and schedules the jobs of `jobs`, `stats` holds the live figures, `lock`
the one-daemon-per-state-folder lock, `watcher` turns file events into queue entries, `workqueue`
coalesces them, `worker` brings one file up to date from its watermark, `keeper` takes the files of
sessions kept whole as they appear, `state` is the SQLite store of watermarks and findings, `report`
writes health reports, `notify` speaks systemd's notify protocol, `units` renders the systemd unit
and launchd agent that run the daemon. It may import repair, the archive, the tracker, the
transcript model, `riffd.config` and the shared seams, never the commands.
"""
