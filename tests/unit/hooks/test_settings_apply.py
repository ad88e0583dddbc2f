"""`riffd.hooks.install.apply` writes a settings file (or Claude Code's ~/.claude.json) only when it
still holds the bytes the change was planned on: a change another program made meanwhile (Claude
Code saving its settings, or its config when riffd holds its lock and Claude Code writes without)
is never written over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from riffd.hooks.install import SettingsError, apply, plan_install


def test_a_file_changed_after_the_plan_is_not_written_over(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"model": "opus"}, indent=2))
    change = plan_install(settings, ["/opt/riffd/bin/riffd"], runs=lambda _command: None)
    assert change.changed
    meanwhile = json.dumps({"model": "sonnet", "permissions": {"allow": ["Bash(ls)"]}}, indent=2)
    settings.write_text(meanwhile)  # Claude Code saves the file between riffd's read and write
    with pytest.raises(SettingsError, match="changed while riffd was changing it"):
        apply(change, tmp_path / "state", "install")
    assert settings.read_text() == meanwhile


def test_a_file_made_after_the_plan_is_not_written_over(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    change = plan_install(settings, ["/opt/riffd/bin/riffd"], runs=lambda _command: None)
    settings.write_text('{"model": "opus"}')
    with pytest.raises(SettingsError, match="changed while riffd was changing it"):
        apply(change, tmp_path / "state", "install")
    assert settings.read_text() == '{"model": "opus"}'
