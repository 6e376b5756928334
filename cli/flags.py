"""absl flags from `pipelines.settings.table`; options default to None so the resolver decides."""
import json
import sys

from absl import flags

from pipelines.settings import table

FLAGS = flags.FLAGS


def define(front: str) -> None:
    """Defines the flags of `front` (`table.RUN` or `table.EXPORT`), with their aliases."""
    for row in table.rows(front):
        default = None if row.option else row.default
        default = list(default) if isinstance(default, tuple) else default
        help_text = row.help_text() if row.option else row.help
        if row.type == "enum":
            flags.DEFINE_enum(row.name, default, list(row.choices), help_text)
        else:
            getattr(flags, f"DEFINE_{row.type}")(row.name, default, help_text)
        for alias_front, alias in row.aliases:
            if alias_front == front:
                flags.DEFINE_alias(alias, row.name)
        # --help lists the key flags of the script that runs (absl: sys.argv[0]).
        FLAGS.register_key_flag_for_module(sys.argv[0], FLAGS[row.name])


def given(front: str) -> dict:
    """The options the user set on `front`'s command line, by name (None: not given)."""
    values = {row.name: FLAGS[row.name].value for row in table.rows(front) if row.option
              and FLAGS[row.name].value is not None}
    if "config_override" in values:
        values["config_override"] = parse_overrides(values["config_override"])
    return values


def parse_overrides(items) -> dict:
    """`key=value` strings -> {key: JSON value, or the string itself}."""
    from pipelines.errors import ConfigError

    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--config_override {item!r}: expected key=value")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return overrides
