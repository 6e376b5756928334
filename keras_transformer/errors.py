"""`UserError`: the base of every error a user fixes by changing their input, flags or files.

It lives in the library, the lowest layer, so that the pipelines (`pipelines.errors`) and
the exporter (`ExportError`) derive from it without importing each other. Each command line
catches it once: one line on stderr, exit status 2, no traceback.
"""


class UserError(ValueError):
    """Input, flags or a model directory the user must fix; the message says how."""
