"""The errors a user can fix: `cli.main` catches `UserError` (`keras_transformer`'s), prints its
one line, naming the file, line or flag at fault and the fix, and exits 2."""
from keras_transformer.errors import ModelDirError, UserError

__all__ = ["UserError", "DataError", "ModelDirError", "ConfigError"]


class DataError(UserError):
    """Input data the pipeline cannot use; the message names the file, the line and the fix."""


class ConfigError(UserError):
    """Flags that contradict each other or what the model directory was trained with."""
