"""The errors a user can fix: the command line (`cli.main`) catches `UserError`
once, prints one line, exits 2.

Every message names the file, line or flag at fault and says what to do. Anything else that
escapes is a bug and keeps its traceback. `UserError` itself is defined in
`keras_transformer.errors`, so that the exporter's `ExportError` derives from it too without
importing `pipelines`.
"""
from keras_transformer.errors import UserError

__all__ = ["UserError", "DataError", "ModelDirError", "ConfigError"]


class DataError(UserError):
    """Input data the pipeline cannot use; the message names the file, the line and the fix."""


class ModelDirError(UserError):
    """A model directory is missing something a stage needs, or holds something broken."""


class ConfigError(UserError):
    """Flags that contradict each other or what the model directory was trained with."""
