"""`UserError`: the base of every error a user fixes by changing their input, flags or files;
each command line prints it as one line on stderr, exit status 2, no traceback."""


class UserError(ValueError):
    """Input, flags or a model directory the user must fix; the message says how."""


class ModelDirError(UserError):
    """A model directory is missing something a stage needs, or holds something broken."""
