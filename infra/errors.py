"""The mistakes a user can fix, each ended by flags.entry_point as one line and exit status 2."""


class UserError(SystemExit):
    """A mistake the user can fix (a bad path, an unreachable hub id, a checkpoint from another
    number of ranks). The message says what to do. A SystemExit, so that no `except
    Exception` swallows it."""


class DataError(ValueError):
    """A problem set the user named that cannot be read (bad path, unknown name, offline hub);
    one clear sentence."""
