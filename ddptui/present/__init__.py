"""Shared rendering for the CLI and the console: rich ``Text`` builders, no Textual.

Each module holds the words one report says, so ``ddptui check`` and the health screen, or
``ddptui trust`` and the console's ``t``, cannot drift apart.
"""
