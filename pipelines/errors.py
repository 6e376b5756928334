"""The errors a user can fix: each CLI catches `UserError` once, prints one line, exits 2.

Every message names the file, line or flag at fault and says what to do. Anything else that
escapes is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """Input, flags or a model directory the user must fix; the message says how."""


class DataError(UserError):
    """Input data the pipeline cannot use; the message names the file, the line and the fix."""


class ModelDirError(UserError):
    """A model directory is missing something a stage needs, or holds something broken."""


class ConfigError(UserError):
    """Flags that contradict each other or what the model directory was trained with."""
