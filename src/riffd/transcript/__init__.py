"""The transcript model: what Claude Code writes and where, read and judged without changing
anything.

Reading lines (`reader`), the compact index of one file (`index`), its conversation structure
(`conversation`, `sidechains`), detection on the chain Claude Code loads (`detect`) and the findings
it reports (`findings`), scanning a file once (`scan`), Claude Code's project folders (`projects`),
the other files it keeps for a session (`sessionfiles`) and its registry of running sessions
(`liveness`). Pure or read-only: it imports only `riffd.fsio` and `riffd.paths`, never repair, the
archive, the daemon or the commands.
"""
