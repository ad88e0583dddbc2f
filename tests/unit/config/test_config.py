"""The TOML configuration: the example cannot drift, every error is reported at once, one precedence
rule, and `riffd config` edits keep the user's file intact."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
import tomllib
import typing
from pathlib import Path

import pytest
import tomlkit

from conftest import REPO_DIR
from helpers.run import run_riffd
from riffd import paths
from riffd.claude_code import folders
from riffd.commands.cli import main
from riffd.commands.output import EXIT_ERROR, EXIT_OK
from riffd.config import (
    Config,
    ConfigError,
    RetryConfig,
    config_path,
    default_config_path,
    example_toml,
    load_config,
    loads_config,
)
from riffd.config.load import advised_config
from riffd.fsio import RetryPolicy
from riffd.transcript.findings import DEFAULT_REPAIRS, FindingClass

EXAMPLE = REPO_DIR / "config" / "riffd.toml"

USER_FILE = """\
# my own riffd settings, hand-written
include = [ "*.jsonl" ]      # transcripts only
exclude = ["scratch/*"]

# watch over NFS, so poll
[watcher]
observer   =   "polling"     # events never arrive here
  debounce = 1.5

[log]  # loud for now
level = 'debug'
"""


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """An environment with every folder riffd derives inside tmp_path and no RIFFD_CONFIG."""
    return {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
    }


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]) -> Path:
    """Put the process environment (which `riffd` reads) in tmp_path too; return the config path to
    use."""
    monkeypatch.delenv("RIFFD_CONFIG", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return tmp_path / "etc" / "riffd.toml"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- the example and the defaults
# ------------------------------------------------------------------------


def test_example_file_is_the_generated_example_so_it_cannot_drift() -> None:
    assert EXAMPLE.read_text(encoding="utf-8") == example_toml(), (
        "config/riffd.toml differs from riffd.config.example_toml(); regenerate it: "
        "python3 -c 'from riffd.config import example_toml; print(example_toml(), end=\"\")' > config/riffd.toml"
    )


def test_example_file_loads_and_equals_the_defaults(environ: dict[str, str]) -> None:
    from_example = load_config(EXAMPLE, environ=environ)
    with_no_file = load_config(environ=environ)
    assert from_example.source == EXAMPLE
    assert with_no_file.source is None
    assert from_example == with_no_file


def test_example_file_names_every_key_of_the_schema(environ: dict[str, str]) -> None:
    document = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert document == load_config(environ=environ).to_toml_dict() | {
        "roots": [],
        "state_dir": "",
        "claude_dir": "",
        "backups": document["backups"] | {"dir": ""},
        "reports": document["reports"] | {"dir": ""},
    }
    assert document["backups"]["dir"] == document["reports"]["dir"] == ""


def test_defaults_with_no_file_at_all(tmp_path: Path, environ: dict[str, str]) -> None:
    config = load_config(environ=environ)
    assert config.source is None
    assert not default_config_path(environ).exists()
    assert config.state_dir == tmp_path / "state"
    assert config.claude_dir == tmp_path / "claude"
    assert config.roots == (tmp_path / "claude" / "projects",)
    assert config.backups.dir == tmp_path / "state" / "backups"
    assert config.reports.dir == tmp_path / "state" / "reports"
    assert config.include == ("*.jsonl",)
    assert config.exclude == ()
    assert config.watcher.observer == "auto"
    assert config.watcher.polling_interval == 5.0
    assert config.repair.mode == "repair"
    assert set(config.repair.classes) == DEFAULT_REPAIRS  # the opt-in classes only when named
    assert config.retry.policy == RetryPolicy()
    assert config.log.level == "info"
    assert config.log.format == "plain"


def test_without_environment_the_folders_come_from_riffd_paths(tmp_path: Path) -> None:
    config = load_config(environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert config.state_dir == paths.state_dir({}).absolute()
    assert config.claude_dir == folders.claude_config_dir({}).absolute()
    assert config.roots == tuple(root.absolute() for root in folders.default_roots({}))


def test_retry_policy_and_values_from_a_file(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(
        tmp_path / "c.toml",
        "[retry]\nattempts = 5\nfirst_wait = 1\nmax_wait = 4.5\n"
        '[repair]\nclasses = ["missing_tool_result"]\nadd_missing_results = false\n',
    )
    config = load_config(path, environ=environ)
    assert config.retry == RetryConfig(attempts=5, first_wait=1.0, max_wait=4.5)
    assert config.retry.policy == RetryPolicy(attempts=5, first_wait=1.0, max_wait=4.5)
    assert isinstance(config.retry.first_wait, float)
    assert config.repair.classes == (FindingClass.MISSING_TOOL_RESULT,)
    assert config.repair.add_missing_results is False


def test_paths_expand_home_and_relative_paths_are_relative_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    del environ["RIFFD_STATE_DIR"]
    path = write(
        tmp_path / "etc" / "c.toml",
        'state_dir = "~/riffd-state"\nroots = ["projects", "~/x/../more"]\n'
        '[backups]\ndir = "../backups"\n',
    )
    config = load_config(path, environ=environ)
    assert config.state_dir == tmp_path / "home" / "riffd-state"
    # `..` collapsed, as the archive keys a transcript (one file, one path string for the daemon and
    # the commands)
    assert [str(root) for root in config.roots] == [
        str(tmp_path / "etc" / "projects"),
        str(tmp_path / "home" / "more"),
    ]
    assert str(config.backups.dir) == str(tmp_path / "backups")
    assert config.reports.dir == tmp_path / "home" / "riffd-state" / "reports"


def test_effective_config_round_trips_through_toml(tmp_path: Path, environ: dict[str, str]) -> None:
    config = load_config(write(tmp_path / "c.toml", USER_FILE), environ=environ)
    dumped = write(tmp_path / "dumped.toml", tomlkit.dumps(config.to_toml_dict()))
    assert load_config(dumped, environ=environ) == config
    assert "source" not in config.to_toml_dict()


def test_config_is_frozen(environ: dict[str, str]) -> None:
    config = load_config(environ=environ)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.log = config.log  # type: ignore[misc]


# --- errors
# ----------------------------------------------------------------------------------------------


def test_every_error_is_reported_at_once_with_file_and_key_path(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    path = write(
        tmp_path / "bad.toml",
        """\
debounce = 1.0
rootz = []
include = "*.jsonl"
tracker = 5

[watcher]
debounse = 2.0
polling_interval = 0
observer = "inotify"

[repair]
classes = ["duplicate_tool_result", "parent_cycle", 3]
add_missing_results = "yes"

[backups]
keep_per_file = 2.5
max_age_days = inf

[retry]
first_wait = 4.0
max_wait = 1.0

[log]
level = "loud"

[archive]
write_delay = 3600
""",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ)
    errors = caught.value.errors
    expected_fragments = [
        'debounce: unknown key (did you mean "watcher.debounce"?)',
        'rootz: unknown key (did you mean "roots"?)',
        'include: wrong type: string "*.jsonl"; expected a list of strings',
        "tracker: wrong type: integer 5; expected a table [tracker]",
        'watcher.debounse: unknown key (did you mean "watcher.debounce"?); expected one of: observer, '
        "polling_interval, debounce, rescan_interval",
        "watcher.polling_interval: out of range: 0; expected a number >= 0.1 and <= 3600",
        'watcher.observer: bad value: string "inotify"; expected one of "auto", "native", "polling"',
        'repair.classes: item 2: bad value: string "parent_cycle", item 3: wrong type: integer 3; expected a list of',
        'repair.add_missing_results: wrong type: string "yes"; expected true or false',
        "backups.keep_per_file: wrong type: number 2.5; expected an integer >= 1 and <= 1000000",
        "backups.max_age_days: out of range: inf; expected a number > 0 and <= 10000000",
        "retry.max_wait: out of range: 1 is less than retry.first_wait (4); expected a number >= retry.first_wait",
        'log.level: bad value: string "loud"; expected one of "debug", "info", "warning", "error"',
        "archive.write_delay: out of range: 3600; expected a number >= 0 and <= 60",
    ]
    assert len(errors) == len(expected_fragments), "\n".join(errors)
    for fragment in expected_fragments:
        assert any(fragment in error for error in errors), f"{fragment!r} not in:\n" + "\n".join(
            errors
        )
    # each names the line its key is on, as a syntax error does (tomllib gives no places)
    lines = {"debounce": 1, "rootz": 2, "include": 3, "tracker": 4, "watcher.debounse": 7}
    lines |= {"watcher.polling_interval": 8, "watcher.observer": 9, "repair.classes": 12}
    lines |= {"repair.add_missing_results": 13, "backups.keep_per_file": 16}
    lines |= {"backups.max_age_days": 17, "retry.max_wait": 21, "log.level": 24}
    lines |= {"archive.write_delay": 27}
    for key, line in lines.items():
        assert sum(error.startswith(f"{path}: line {line}: {key}: ") for error in errors) == 1, key
    assert all("; expected " in error for error in errors)
    assert str(caught.value) == "\n".join(errors)


def test_toml_syntax_error_names_file_line_and_column(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    path = write(tmp_path / "broken.toml", '[watcher]\ndebounce = 1.0\nobserver = "auto\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ)
    (error,) = caught.value.errors
    assert error.startswith(f"{path}: line 3, column ")
    assert "TOML syntax error" in error
    assert error.endswith("expected valid TOML (https://toml.io)")


def test_config_set_on_a_file_that_does_not_parse_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tomlkit names the end of a file as the character '\\x00' at line 1 column 0: `config set`
    said that of `roots = [`; it now words it as the loader does."""
    path = write(tmp_path / "cut.toml", "roots = [\n")
    assert main(["--config", str(path), "config", "set", "watcher.debounce", "2"]) == 2
    err = capsys.readouterr().err
    assert "TOML syntax error: Invalid value (at end of document)" in err and "x00" not in err
    assert path.read_text() == "roots = [\n"


def test_override_errors_are_reported_with_the_file_errors(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    path = write(tmp_path / "c.toml", "[log]\nformat = 'xml'\n")
    with pytest.raises(ConfigError) as caught:
        load_config(
            path,
            environ=environ,
            overrides={"watcher.debounce": -1.0, "log.levl": "debug", "watcher": 1},
        )
    errors = caught.value.errors
    assert len(errors) == 4, errors
    assert any(error.startswith(f"{path}: line 2: log.format: bad value") for error in errors)
    assert (
        "command line: watcher.debounce: out of range: -1; expected a number >= 0 and <= 3600"
        in errors
    )
    assert any(
        error.startswith('command line: log.levl: unknown key (did you mean "log.level"?)')
        for error in errors
    )
    assert any(
        error.startswith("command line: watcher: is a table, not a value") for error in errors
    )


def test_a_missing_file_named_explicitly_is_an_error(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    missing = tmp_path / "nowhere" / "riffd.toml"
    with pytest.raises(ConfigError, match="no such file") as caught:
        load_config(missing, environ=environ)
    assert caught.value.errors[0].startswith(f"{missing}: ")
    with pytest.raises(ConfigError, match="no such file"):
        load_config(environ=environ | {"RIFFD_CONFIG": str(missing)})


def test_a_missing_file_at_the_default_location_means_defaults(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    assert default_config_path(environ) == tmp_path / "xdg" / "riffd" / "config.toml"
    assert load_config(environ=environ).source is None
    write(default_config_path(environ), "[log]\nlevel = 'error'\n")
    config = load_config(environ=environ)
    assert config.source == default_config_path(environ)
    assert config.log.level == "error"


def test_config_path_flag_beats_environment_beats_default(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    assert config_path(None, environ) == default_config_path(environ)
    with_env = environ | {"RIFFD_CONFIG": str(tmp_path / "env.toml")}
    assert config_path(None, with_env) == tmp_path / "env.toml"
    assert config_path(tmp_path / "flag.toml", with_env) == tmp_path / "flag.toml"


# --- precedence
# ------------------------------------------------------------------------------------------


def test_precedence_flag_over_environment_over_file_over_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RIFFD_CONFIG", raising=False)
    monkeypatch.delenv("RIFFD_STATE_DIR", raising=False)
    path = write(
        tmp_path / "c.toml", f'state_dir = "{tmp_path / "from-file"}"\n[log]\nlevel = "debug"\n'
    )

    config = load_config(path)
    assert config.state_dir == tmp_path / "from-file"  # file over default
    assert config.backups.dir == tmp_path / "from-file" / "backups"
    assert config.log.level == "debug"
    assert config.log.format == "plain"  # default: nobody set it

    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "from-env"))
    config = load_config(path)
    assert config.state_dir == tmp_path / "from-env"  # environment over file
    assert config.backups.dir == tmp_path / "from-env" / "backups"

    config = load_config(
        path,
        overrides={
            "state_dir": tmp_path / "from-flag",
            "log.level": "error",
            "watcher.debounce": "2",
        },
    )
    assert config.state_dir == tmp_path / "from-flag"  # flag over environment
    assert config.reports.dir == tmp_path / "from-flag" / "reports"
    assert config.log.level == "error"  # flag over file
    assert config.watcher.debounce == 2.0  # a flag's text is read as a TOML value

    monkeypatch.setenv("RIFFD_CONFIG", str(path))
    assert load_config().state_dir == tmp_path / "from-env"  # $RIFFD_CONFIG names the file


def test_claude_config_dir_feeds_only_the_defaults(tmp_path: Path, environ: dict[str, str]) -> None:
    environ["CLAUDE_CONFIG_DIR"] = str(tmp_path / "other-claude")
    config = load_config(environ=environ)
    assert config.claude_dir == tmp_path / "other-claude"
    assert config.roots == (tmp_path / "other-claude" / "projects",)
    path = write(
        tmp_path / "c.toml", f'claude_dir = "{tmp_path / "mine"}"\nroots = ["{tmp_path / "r"}"]\n'
    )
    config = load_config(path, environ=environ)
    assert config.claude_dir == tmp_path / "mine"
    assert config.roots == (tmp_path / "r",)


def test_loads_config_checks_text_as_if_it_were_the_file(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    source = tmp_path / "c.toml"
    assert (
        loads_config("[tracker]\nmax_calls = 7\n", source=source, environ=environ).tracker.max_calls
        == 7
    )
    with pytest.raises(ConfigError) as caught:
        loads_config("[tracker]\nmax_calls = 0\n", source=source, environ=environ)
    assert caught.value.errors == [
        f"{source}: line 2: tracker.max_calls: out of range: 0; expected an integer >= 1 and <= 1000000"
    ]


def test_configs_from_different_files_with_the_same_values_are_equal(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    first = load_config(write(tmp_path / "a.toml", USER_FILE), environ=environ)
    second = load_config(write(tmp_path / "b.toml", USER_FILE), environ=environ)
    assert first == second
    assert first.source != second.source
    assert isinstance(first, Config)


# --- riffd config
# ----------------------------------------------------------------------------------------


def test_config_init_writes_the_example_and_refuses_to_overwrite(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", str(isolated), "config", "init"]) == EXIT_OK
    assert isolated.read_text(encoding="utf-8") == example_toml()
    assert capsys.readouterr().out.strip() == str(isolated)
    write(isolated, USER_FILE)
    assert main(["--config", str(isolated), "config", "init"]) == EXIT_ERROR
    assert "--force" in capsys.readouterr().err
    assert isolated.read_text(encoding="utf-8") == USER_FILE
    assert main(["--config", str(isolated), "config", "init", "--force"]) == EXIT_OK
    assert isolated.read_text(encoding="utf-8") == example_toml()
    assert [name for name in os.listdir(isolated.parent)] == [isolated.name]  # no temp files left


def test_config_init_uses_riffd_config_from_the_environment(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIFFD_CONFIG", str(isolated))
    assert main(["config", "init"]) == EXIT_OK
    assert isolated.is_file()


def test_config_path_prints_the_path_and_whether_it_exists(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", str(isolated), "config", "path"]) == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out == f"{isolated}\n"
    assert "from --config" in captured.err
    # the init it advises writes this file, not the default one (run as printed, it wrote that)
    assert (
        "does not exist (`riffd run` and the commands that edit files refuse it, the others use "
        f"the defaults; `riffd --config {isolated} config init` writes one)"
    ) in captured.err
    folder = isolated.parent / "a-folder"
    folder.mkdir(parents=True)
    assert main(["--config", str(folder), "config", "path"]) == EXIT_OK
    assert "a folder, not a riffd config file" in capsys.readouterr().err
    write(isolated, USER_FILE)
    assert main(["--config", str(isolated), "config", "path"]) == EXIT_OK
    assert "exists" in capsys.readouterr().err
    assert main(["config", "path"]) == EXIT_OK
    assert capsys.readouterr().out == f"{default_config_path()}\n"


def test_config_show_prints_the_effective_config_as_toml(
    isolated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(isolated, USER_FILE)
    assert main(["--config", str(isolated), "config", "show"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"# Effective riffd configuration, read from {isolated}\n")
    shown = tomllib.loads(out)
    assert shown == load_config(isolated).to_toml_dict()
    assert shown["watcher"]["observer"] == "polling"
    assert shown["state_dir"] == str(tmp_path / "state")  # RIFFD_STATE_DIR, resolved
    assert shown["backups"]["dir"] == str(tmp_path / "state" / "backups")


def test_config_validate_prints_every_error_or_ok(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # named, but missing
    assert main(["--config", str(isolated), "config", "validate"]) == EXIT_ERROR
    assert "no such file" in capsys.readouterr().err
    write(isolated, USER_FILE)
    assert main(["--config", str(isolated), "config", "validate"]) == EXIT_OK
    assert capsys.readouterr().out == "ok\n"
    write(isolated, "[watcher]\nobserver = 'fanotify'\ndebounce = -1\n[log]\nlevel = 3\n")
    assert main(["--config", str(isolated), "config", "validate"]) == EXIT_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    for line, key in ((2, "watcher.observer"), (3, "watcher.debounce"), (5, "log.level")):
        assert f"{isolated}: line {line}: {key}: " in captured.err
    assert "3 configuration error(s)" in captured.err


def test_config_validate_with_no_file_at_the_default_location_is_ok(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "validate"]) == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out == "ok\n"
    assert "the defaults apply" in captured.err


def test_config_set_changes_one_value_and_keeps_everything_else_byte_for_byte(
    isolated: Path,
) -> None:
    write(isolated, USER_FILE)
    assert main(["--config", str(isolated), "config", "set", "watcher.debounce", "3"]) == EXIT_OK
    assert isolated.read_text(encoding="utf-8") == USER_FILE.replace(
        "  debounce = 1.5", "  debounce = 3"
    )
    assert load_config(isolated).watcher.debounce == 3.0

    assert (
        main(["--config", str(isolated), "config", "set", "watcher.observer", "native"]) == EXIT_OK
    )
    after_observer = USER_FILE.replace("  debounce = 1.5", "  debounce = 3").replace(
        '"polling"     # events never arrive here', '"native"     # events never arrive here'
    )
    assert isolated.read_text(encoding="utf-8") == after_observer

    assert (
        main(["--config", str(isolated), "config", "set", "exclude", '["scratch/*", "tmp/*"]'])
        == EXIT_OK
    )
    assert load_config(isolated).exclude == ("scratch/*", "tmp/*")
    assert isolated.read_text(encoding="utf-8") == after_observer.replace(
        'exclude = ["scratch/*"]', 'exclude = ["scratch/*", "tmp/*"]'
    )


def test_config_set_adds_missing_keys_and_tables_without_moving_the_rest(
    isolated: Path, tmp_path: Path
) -> None:
    write(isolated, USER_FILE)
    assert (
        main(["--config", str(isolated), "config", "set", "state_dir", str(tmp_path / "s")])
        == EXIT_OK
    )
    assert main(["--config", str(isolated), "config", "set", "retry.attempts", "5"]) == EXIT_OK
    text = isolated.read_text(encoding="utf-8")
    top, _, rest = USER_FILE.partition("\n# watch over NFS")
    assert text.startswith(f'{top}state_dir = "{tmp_path / "s"}"\n\n# watch over NFS{rest}')
    assert text.endswith("[retry]\nattempts = 5\n")
    assert tomllib.loads(text)["state_dir"] == str(tmp_path / "s")
    config = load_config(isolated)
    # RIFFD_STATE_DIR still wins
    assert (config.state_dir, config.retry.attempts) == (
        tmp_path / "state",
        5,
    )


def test_config_set_rejects_invalid_values_and_leaves_the_file_untouched(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(isolated, USER_FILE)
    before = isolated.stat()
    for key, value in [
        ("watcher.debounce", "-1"),
        ("log.level", "loud"),
        ("watcher.debounse", "2"),
        ("backups.keep_per_file", "true"),
        ("repair.classes", '["parent_cycle"]'),
        ("retry.max_wait", "0.1"),
        ("watcher", "1"),
        ("log.level.deeper", "x"),
    ]:
        assert main(["--config", str(isolated), "config", "set", key, value]) == EXIT_ERROR, key
        err = capsys.readouterr().err
        assert "riffd: error: " in err, key
        assert isolated.read_text(encoding="utf-8") == USER_FILE, key
    after = isolated.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert os.listdir(isolated.parent) == [isolated.name]


def test_config_set_refuses_to_edit_a_file_with_a_syntax_error(isolated: Path) -> None:
    write(isolated, "[watcher\n")
    assert main(["--config", str(isolated), "config", "set", "log.level", "debug"]) == EXIT_ERROR
    assert isolated.read_text(encoding="utf-8") == "[watcher\n"


def test_config_set_creates_the_file_from_the_example_when_missing(isolated: Path) -> None:
    assert not isolated.parent.exists()
    assert main(["--config", str(isolated), "config", "set", "log.format", "json"]) == EXIT_OK
    assert isolated.read_text(encoding="utf-8") == example_toml().replace(
        'format = "plain"', 'format = "json"'
    )
    assert load_config(isolated).log.format == "json"


def test_config_set_reads_value_as_toml_when_it_parses_else_as_a_string(
    isolated: Path, tmp_path: Path
) -> None:
    write(isolated, "")
    assert (
        main(["--config", str(isolated), "config", "set", "repair.add_missing_results", "false"])
        == EXIT_OK
    )
    assert (
        main(["--config", str(isolated), "config", "set", "backups.dir", "~/riffd backups"])
        == EXIT_OK
    )
    assert (
        main(["--config", str(isolated), "config", "set", "reports.dir", '"~/quoted"']) == EXIT_OK
    )
    document = tomllib.loads(isolated.read_text(encoding="utf-8"))
    assert document["repair"]["add_missing_results"] is False
    assert document["backups"]["dir"] == "~/riffd backups"
    assert document["reports"]["dir"] == "~/quoted"
    assert load_config(isolated).backups.dir == tmp_path / "home" / "riffd backups"


def test_config_set_can_fix_a_file_one_key_at_a_time(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file with two bad keys: fixing one must be allowed, although the result still has the other
    error."""
    write(isolated, "[watcher]\ndebounce = -1\n[log]\nlevel = 'loud'\n")
    assert main(["--config", str(isolated), "config", "set", "watcher.debounce", "1"]) == EXIT_ERROR
    assert "log.level" in capsys.readouterr().err
    assert (
        isolated.read_text(encoding="utf-8") == "[watcher]\ndebounce = 1\n[log]\nlevel = 'loud'\n"
    )
    assert main(["--config", str(isolated), "config", "set", "log.level", "info"]) == EXIT_OK
    load_config(isolated)


def test_config_set_through_a_symlink_keeps_the_link(isolated: Path, tmp_path: Path) -> None:
    real = write(tmp_path / "dotfiles" / "riffd.toml", USER_FILE)
    isolated.parent.mkdir(parents=True)
    isolated.symlink_to(real)
    assert main(["--config", str(isolated), "config", "set", "log.level", "warning"]) == EXIT_OK
    assert isolated.is_symlink()
    assert load_config(real).log.level == "warning"


@pytest.mark.parametrize(
    "command", ["notify-send 'riffd", 'notify-send "riffd', "notify-send riffd\\"]
)
def test_a_notify_command_that_does_not_split_into_words_is_refused(
    isolated: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    write(isolated, f"[notify]\ncommand = {tomlkit.item(command).as_string()}\n")
    assert main(["--config", str(isolated), "config", "validate"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert (
        f"{isolated}: line 2: notify.command: bad value: " in err
        and "expected a command line" in err
    )
    with pytest.raises(ConfigError, match=r"notify\.command: bad value"):
        load_config(isolated)

    write(isolated, "")
    assert (
        main(["--config", str(isolated), "config", "set", "notify.command", command]) == EXIT_ERROR
    )
    assert "notify.command: bad value" in capsys.readouterr().err
    assert isolated.read_text(encoding="utf-8") == ""
    assert (
        main(
            [
                "--config",
                str(isolated),
                "config",
                "set",
                "notify.command",
                "notify-send 'riffd says'",
            ]
        )
        == EXIT_OK
    )
    assert load_config(isolated).notify.command == "notify-send 'riffd says'"


def test_advice_names_the_config_file_unless_riffd_reads_it_unasked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RIFFD_CONFIG", raising=False)
    assert advised_config(load_config()) is None  # no file at all
    default = tmp_path / "xdg" / "riffd" / "config.toml"
    default.parent.mkdir(parents=True)
    default.write_text("")
    assert advised_config(load_config()) is None
    assert advised_config(load_config(default)) is None  # named, but the one read unasked
    named = tmp_path / "elsewhere.toml"
    named.write_text("")
    assert advised_config(load_config(named)) == named
    monkeypatch.setenv("RIFFD_CONFIG", str(named))
    assert advised_config(load_config()) == named
    # named and missing: riffd goes on with the defaults, and so does the command it advises
    missing = tmp_path / "missing.toml"
    assert advised_config(loads_config("", source=missing)) is None


def test_a_config_path_that_is_a_folder_says_so_and_advises_no_init(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path)
    (error,) = raised.value.errors
    assert error == f"{tmp_path}: a folder; --config and RIFFD_CONFIG name a riffd config file"


def _numeric_keys() -> list[tuple[str, str, dict[str, object]]]:
    """(table, key, metadata) of every number the configuration's tables hold."""
    keys = []
    for table, table_type in typing.get_type_hints(Config).items():
        if not dataclasses.is_dataclass(table_type):
            continue
        hints = typing.get_type_hints(table_type)
        for field in dataclasses.fields(table_type):
            if hints[field.name] in (int, float):
                keys.append((table, field.name, dict(field.metadata)))
    return keys


def test_every_number_has_an_upper_bound_and_a_value_past_it_is_an_error(tmp_path: Path) -> None:
    """A rescan interval of 1e14 s, or 1e308 for a retention, settle or report interval, passed
    `config validate` and then stopped the daemon with a traceback, at start or at a reload."""
    keys = _numeric_keys()
    assert len(keys) >= 15, keys
    unbounded = [f"{table}.{key}" for table, key, meta in keys if meta.get("le") is None]
    assert not unbounded, f"numbers without an upper bound: {unbounded}"
    merged: dict[str, list[str]] = {}
    for table, key, meta in keys:
        # past each bound by its own type: an integer key given a float is a wrong type, not a
        # value past its bound
        big = "1e308" if isinstance(meta.get("le"), float) else str(10**15)
        merged.setdefault(table, []).append(f"{key} = {big}")
    text = "".join(f"[{table}]\n" + "\n".join(lines) + "\n" for table, lines in merged.items())
    with pytest.raises(ConfigError) as raised:
        loads_config(text, source=tmp_path / "c.toml")
    said = "\n".join(raised.value.errors)
    for table, key, _meta in keys:
        assert f"{table}.{key}: out of range: " in said, (table, key, said)


def test_a_fifo_or_a_looping_link_as_the_config_is_one_line_and_no_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO named by --config hung every command; a link in a loop was called "no such file",
    with `config init` advised, which then stopped with a traceback."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    # (returns: a FIFO no one writes to reads as empty; one written to, as `--config <(...)`
    # makes, is read to its end)
    assert load_config(fifo).roots
    writer = subprocess.Popen(["sh", "-c", f"printf '[watcher]\\ndebounce = 7\\n' > {fifo}"])
    deadline = time.monotonic() + 10  # (until the writer waits at its end)
    while load_config(fifo).watcher.debounce != 7 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.wait(10) == 0
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop.name)
    with pytest.raises(ConfigError) as raised:
        load_config(loop)
    assert "a symbolic link to nothing" in raised.value.errors[0]
    assert "config init" not in raised.value.errors[0]
    capsys.readouterr()
    assert main(["--config", str(loop), "config", "init"]) == EXIT_ERROR
    assert capsys.readouterr().err == (
        f"riffd: error: {loop}: cannot write: a symbolic link in a loop\n"
    )
    missing = tmp_path / "nope.toml"
    assert main(["--config", str(missing), "config", "path"]) == EXIT_OK
    assert "the defaults apply" not in capsys.readouterr().err  # (the commands refuse it)


def test_a_root_that_is_a_file_is_an_error_and_a_missing_one_is_not(tmp_path: Path) -> None:
    """`config validate` said ok of a root that is a file, and the daemon then watched nothing."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    source = tmp_path / "c.toml"
    with pytest.raises(ConfigError) as raised:
        loads_config(f'roots = ["{tmp_path / "later"}", "{a_file}"]\n', source=source)
    assert raised.value.errors == [
        f"{source}: line 1: roots: item 2: {a_file} is not a folder; expected the folders holding Claude "
        "Code's project folders (its projects/)"
    ]
    assert loads_config(f'roots = ["{tmp_path / "later"}"]\n', source=source).roots


def test_a_file_where_riffd_makes_a_folder_is_said_as_the_setting_it_is(tmp_path: Path) -> None:
    """A state folder that is a file (or lies below one), a log file below a file: `riffd run` said
    `[Errno 17] File exists` or `Not a directory`, naming no setting."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    folder = tmp_path / "folder"
    folder.mkdir()
    source = tmp_path / "c.toml"
    with pytest.raises(ConfigError) as raised:
        loads_config(
            f'[reports]\ndir = "{a_file}"\n[log]\nfile = "{a_file / "x.log"}"\n',
            source=source,
            environ={"RIFFD_STATE_DIR": str(a_file / "sub")},
        )
    assert sorted(raised.value.errors) == sorted(
        [
            f"environment (RIFFD_STATE_DIR): state_dir: {a_file / 'sub'}: {a_file} is a file, not "
            "a folder; expected a folder riffd can make or use",
            f"{source}: line 2: reports.dir: {a_file}: a file, not a folder; expected a folder riffd can "
            "make or use",
            f"{source}: line 4: log.file: {a_file / 'x.log'}: {a_file} is a file, not a folder; expected a "
            "file in a folder riffd can make or use",
        ]
    )
    with pytest.raises(ConfigError) as raised:
        loads_config(f'[log]\nfile = "{folder}"\n', source=source, environ={})
    assert raised.value.errors == [
        f"{source}: line 2: log.file: {folder}: a folder; expected a file"
    ]
    # folders not there yet, below a folder: made when needed
    assert loads_config(
        f'state_dir = "{folder / "a" / "b"}"\n[log]\nfile = "{folder / "c" / "x.log"}"\n',
        source=source,
        environ={},
    )


def test_what_the_folder_checks_leave_alone_still_loads(tmp_path: Path) -> None:
    """A root or a state folder that is a link to nothing yet (a drive not mounted) was called a
    file and refused; `--config /dev/null`, the usual "defaults only", was refused as not a
    regular file; a long `max_age_days` (backups kept for good) was out of range."""
    link = tmp_path / "not-mounted"
    link.symlink_to(tmp_path / "nowhere")
    source = tmp_path / "c.toml"
    config = loads_config(
        f'state_dir = "{link / "state"}"\nroots = ["{link}"]\n[backups]\nmax_age_days = 100000\n',
        source=source,
        environ={},
    )
    assert config.roots == (link,) and config.backups.max_age_days == 100000
    assert load_config(Path("/dev/null"), environ={}).roots


def test_an_error_in_the_environment_is_one_line_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """RIFFD_STATE_DIR naming a file: the read-only commands fell back on the defaults, which read
    the environment again and raised: a traceback and exit 1."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    monkeypatch.setenv("RIFFD_STATE_DIR", str(a_file))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    commands = (["scan"], ["sessions"], ["backups", "list"], ["fix"], ["status"], ["report"])
    for command in (*commands, ["ack", "--list"]):
        assert main(command) == EXIT_ERROR, command
        err = capsys.readouterr().err
        # said once (status said it three times, and that a config file with no error had some)
        assert err.count(f"environment (RIFFD_STATE_DIR): state_dir: {a_file}: a file") == 1, err
        assert "cannot be used as it is" not in err, err


def test_a_fifo_config_hangs_no_command_that_reads_it(tmp_path: Path) -> None:
    """`status`, `report` and `config set` read a FIFO named as the config the old way, and hung."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    env = {"RIFFD_STATE_DIR": str(tmp_path / "state"), "CLAUDE_CONFIG_DIR": str(tmp_path / "c")}
    for command in (["status"], ["report"], ["config", "set", "watcher.debounce", "2"]):
        result = run_riffd("--config", str(fifo), *command, env=env, timeout=60)
        assert "Traceback" not in result.stderr, (command, result.stderr)


def test_an_error_names_the_line_of_its_key_in_toml_written_any_way(tmp_path: Path) -> None:
    """A key given by the keys below it (`classes.x = 1`) was said on its table's line; a table
    name inside a multi-line string after the start of a value was taken for a table."""
    source = tmp_path / "c.toml"
    text = (
        "[repair]\n"
        'mode = "report"\n'
        "\n"
        "classes.duplicate_results = false\n"
        '[notify]\ncommand = { x = """\n[watcher]\ndebounse = 1\n""" }\n'
        "[watcher]\r\n"
        "debounse = 2\r\n"
    )
    with pytest.raises(ConfigError) as raised:
        loads_config(text, source=source, environ={})
    errors = raised.value.errors
    assert any(error.startswith(f"{source}: line 4: repair.classes: ") for error in errors), errors
    assert any(error.startswith(f"{source}: line 11: watcher.debounse: ") for error in errors)
    assert any(error.startswith(f"{source}: line 6: notify.command: ") for error in errors)
