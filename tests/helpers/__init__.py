"""What the tests share beyond tests/conftest.py: `run` (riffd as a real subprocess: the one way to
start it), `daemon` (`riffd run` in a sandbox), `damage` (damage injectors), `fusefs` (a FUSE
filesystem that fails on purpose), `sessiontree` (a session's files as the client lays them out),
`browser` (a page rendered by headless Chromium), `wordy` (sessions of distinct texts for the
archive), `archive_damage` (an archive's stored bytes damaged in place), `replacing` (a file replaced
before a chosen file call)."""
