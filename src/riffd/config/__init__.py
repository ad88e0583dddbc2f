"""riffd's configuration: one TOML file read into frozen dataclasses, with every error reported at
once.

`model` holds the dataclasses (the defaults are written there and nowhere else), `schema` reads the
keys off them, checks one value and renders the commented example file, `load` finds the file and
layers file, environment and flags. This package may import `riffd.paths`, `riffd.fsio` and the
finding classes of `riffd.transcript.findings`; everything else imports it through the names below.

Where the file is: `--config PATH`, else `$RIFFD_CONFIG`, else `<platformdirs user config
dir>/riffd/config.toml` (`~/.config/riffd/config.toml` on Linux). A missing file at that default
location means "all defaults"; a missing file named by `--config` or `$RIFFD_CONFIG` is an error.

Precedence, highest first (one rule for every key):

1. command-line flags, passed to `load_config` as `overrides` with dotted keys (`"log.level"`,
   `"state_dir"`);
2. the environment: `RIFFD_STATE_DIR` replaces `state_dir`;
3. the file;
4. the defaults, which are written in exactly one place: the dataclass fields in `model`.

Folders whose default is "" (or `[]` for `roots`) are derived when the config is loaded: `state_dir`
from `riffd.paths.state_dir()`, `claude_dir` and `roots` from `riffd.claude_code.folders` (so `CLAUDE_CONFIG_DIR`,
Claude Code's own variable, changes those defaults but never a value the file sets), `backups.dir`
and `reports.dir` inside `state_dir`. `~` is expanded everywhere; a relative path in the file is
relative to the file's folder, one from a flag or the environment to the current folder.

Errors read `<where>: <key.path>: <problem>; expected <form>`, where `<where>` is the file (or
"command line", or the environment variable) the value came from, e.g.
`/home/me/.config/riffd/config.toml: watcher.debounse: unknown key (did you mean
"watcher.debounce"?); expected one of: observer, polling_interval, debounce, rescan_interval`.
"""

from riffd.config.load import (
    config_path,
    default_config_path,
    file_stamp,
    load_config,
    loads_config,
    parse_toml_value,
)
from riffd.config.model import (
    CONFIG_ENV,
    STATE_DIR_ENV,
    ArchiveConfig,
    BackupConfig,
    Config,
    ConfigError,
    LogConfig,
    NotifyConfig,
    RepairConfig,
    ReportConfig,
    RetryConfig,
    TrackerConfig,
    WatcherConfig,
)
from riffd.config.schema import example_toml

__all__ = [
    "CONFIG_ENV",
    "STATE_DIR_ENV",
    "ArchiveConfig",
    "BackupConfig",
    "Config",
    "ConfigError",
    "LogConfig",
    "NotifyConfig",
    "RepairConfig",
    "ReportConfig",
    "RetryConfig",
    "TrackerConfig",
    "WatcherConfig",
    "config_path",
    "default_config_path",
    "example_toml",
    "file_stamp",
    "load_config",
    "loads_config",
    "parse_toml_value",
]
