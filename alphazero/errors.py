"""Errors that the command line reports as a one-line message and a non-zero exit."""


class UserError(Exception):
    """Bad input from the user (a flag, a path, a run directory): the message says what to do."""
