"""The daemon (`riffd run`): watch the roots, keep findings current, repair idle sessions, archive,
report.

`runner` is the lifecycle (start, serve, reload, shutdown); it holds the parts: `work_thread` hands
each queued path to the worker or the keeper, `schedule` runs the jobs of `jobs`, `archiving` holds
the archive while it can be open, `publisher` publishes the live figures (`counters`) and writes the
reports; `disk_full` watches for a full disk under the state folder; `lock` is the
one-daemon-per-state-folder lock; `watcher` turns file events into queue entries, `workqueue`
coalesces them. The `worker` brings one file up to date from its watermark as a pipeline: `reading`
(from the watermark, with its index `cache`), `sinks` (the index, the tracker, the archive,
whose appended lines wait a few seconds in `archive_batch`), `judging`, then `repairing`; `outcome`
is what it is set to do and what it did. `keeper` takes the files of sessions kept whole as they
appear; `alerts` runs the configured notify command, `notify` speaks systemd's notify protocol,
and `service_files` renders the systemd unit and launchd agent that run the daemon. It may import repair, the archive, the tracker, the state store, the reports,
the transcript model, `riffd.config` and the shared seams, never the commands.
"""
