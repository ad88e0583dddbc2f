"""The transcript model: what Claude Code writes, read and judged without changing anything.

Reading lines (`reader`, with a second process for big files: `parallel_read`), the fields
detection needs (`records`, a batch of them as `columns`), characters that are not text
(`characters`), telling a transcript from another file
(`shape`), the compact index of one file (`index`, made by the builder in `index_builder`, which
indexes message lines' content with `blocks`, with parents
looked up in the session file by `external`, kept up to date append by append by `incremental`),
its conversation structure (`conversation`, `sidechains`, linked to their agents by
`agent_links`), the conversation Claude Code loads (`loaded`), detection on it (`detect`, its API messages
checked by `messages`) and the
findings it reports (`findings`), acknowledged findings (`acks`), scanning a file once (`scan`),
describing and listing sessions (`sessions`), and resolving the
sessions a command names (`targets`). Pure or read-only: it imports
only the shared seams and `riffd.claude_code`, never repair, the archive, the daemon or the
commands.
"""
