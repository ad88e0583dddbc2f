"""`riffd.hooks.install.apply` writes a settings file (or Claude Code's ~/.claude.json) only when it
still holds the bytes the change was planned on: a change another program made meanwhile (Claude
Code saving its settings, or its config when riffd holds its lock and Claude Code writes without)
is never written over."""

from __future__ import annotations

import json
import os
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


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"effort": 1e400}', "past what riffd can write back"),
        (b'{"effort": NaN}', "NaN, which is not JSON"),
        (b'{"big": ' + b"9" * 5000 + b"}", "digits"),
        ('{"x": 1}'.encode("utf-16"), "not UTF-8"),
    ],
)
def test_a_settings_file_riffd_cannot_write_back_as_it_is_is_refused(
    tmp_path: Path, content: bytes, said: str
) -> None:
    """`1e400` was written back as `Infinity` (Claude Code then reads no setting at all); an
    integer of 5,000 digits, UTF-16 and others gave a traceback."""
    settings = tmp_path / "settings.json"
    settings.write_bytes(content)
    with pytest.raises(SettingsError, match=said):
        plan_install(settings, ["/opt/riffd/bin/riffd"], runs=lambda _command: None)
    assert settings.read_bytes() == content


def test_odd_but_whole_settings_get_the_hooks_and_keep_every_value(tmp_path: Path) -> None:
    """`"hooks": null` and a lone surrogate in a value gave a traceback; 20,000 keys took 7.7 s."""
    settings = tmp_path / "settings.json"
    many = {f"k{number}": number for number in range(20_000)}
    raw = json.dumps({"hooks": None, "note": "\ud800 cut", **many}, indent=2).encode()
    settings.write_bytes(raw)
    change = plan_install(settings, ["/opt/riffd/bin/riffd"], runs=lambda _command: None)
    apply(change, tmp_path / "state", "install")
    written = json.loads(settings.read_bytes())
    assert written["note"] == "\ud800 cut" and written["k19999"] == 19999
    assert set(written["hooks"]) == {"PreToolUse", "SessionStart"}


def test_a_fifo_named_settings_json_is_refused_not_waited_on(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    os.mkfifo(settings)
    with pytest.raises(SettingsError, match="not a regular file"):
        plan_install(settings, ["/opt/riffd/bin/riffd"], runs=lambda _command: None)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names the file synced from /proc")
def test_a_file_written_while_the_new_one_is_synced_is_not_written_over(tmp_path: Path) -> None:
    """The last look came before the new bytes were written and synced: a save by Claude Code in
    that time (milliseconds; 1.5 s on a slow disk) was lost to the rename. It comes right before
    the rename now: a writer in the sync's place is found, and nothing is replaced."""
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"model": "opus"}, indent=2))
    meanwhile = json.dumps({"model": "opus", "permissions": {"allow": ["Bash(ls)"]}}, indent=2)
    real_fsync = os.fsync

    def fsync_then_a_save(fd: int) -> None:  # (Claude Code saves while riffd's copy syncs)
        real_fsync(fd)
        written = os.readlink(f"/proc/self/fd/{fd}")
        if written.endswith(".tmp") and "/.settings.json." in written:  # (not a backup's copy)
            settings.write_text(meanwhile)

    change = plan_install(settings, ["/opt/riffd/bin/riffd"], runs=lambda _command: None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", fsync_then_a_save)
        with pytest.raises(SettingsError, match="changed while riffd was changing it"):
            apply(change, tmp_path / "state", "install")
    assert settings.read_text() == meanwhile
    assert not [path for path in tmp_path.iterdir() if path.name.endswith(".tmp")]
