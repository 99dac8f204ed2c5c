"""Exceptions that cross layers. Each carries a message meant for the user, not a traceback."""

from __future__ import annotations


class DdptuiError(Exception):
    """Base for errors ddptui reports to the user; ``exit_code`` is what the CLI returns."""

    exit_code = 1


class UsageError(DdptuiError):
    """Bad input from the user: arguments, files, configuration. Exit code 2."""

    exit_code = 2


class ConfigError(UsageError):
    """A hosts file that cannot be used; the message names the table, entry and key."""
