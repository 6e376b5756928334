"""The errors a user can fix: each CLI catches `UserError` once, prints one line, exits 2.

Every message names the file, line or flag at fault and says what to do. Anything else that
escapes is a bug and keeps its traceback. `UserError` itself is defined in
`keras_transformer.errors`, so that the exporter's `ExportError` derives from it too without
importing `pipelines`.
"""
from keras_transformer.errors import UserError

__all__ = ["UserError", "DataError", "ModelDirError", "ConfigError", "USAGE_EXIT", "parse_flags"]


class DataError(UserError):
    """Input data the pipeline cannot use; the message names the file, the line and the fix."""


class ModelDirError(UserError):
    """A model directory is missing something a stage needs, or holds something broken."""


class ConfigError(UserError):
    """Flags that contradict each other or what the model directory was trained with."""


USAGE_EXIT = 2


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing for `app.run(main, flags_parser=parse_flags)`: a malformed flag is
    a user error like any other, one line on stderr and exit status 2 (absl exits 1)."""
    import sys

    from absl import flags

    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        program = argv[0] if argv else "run.py"
        message = " ".join(str(error).split())
        sys.stderr.write(f"{program}: error: {message} (--helpfull lists every flag)\n")
        sys.exit(USAGE_EXIT)
