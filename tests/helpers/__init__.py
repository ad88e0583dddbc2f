"""What the tests share beyond tests/conftest.py: `damage` (damage injectors), `daemon` (`riffd
run` in a sandbox), `fusefs` (a FUSE filesystem that fails on purpose), `sessiontree` (a session's
files as the client lays them out)."""
