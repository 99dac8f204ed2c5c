"""``ddptui config HOSTS [--json]``: validate a hosts file and print the resolved configuration."""

from __future__ import annotations

import argparse
import sys

from ddptui.config import config_to_dict, config_to_toml, load_config
from ddptui.present.json_out import write_json


def run(args: argparse.Namespace) -> int:
    """Print the resolved configuration (TOML, or JSON with ``--json``); exit 0.

    An invalid file raises :class:`~ddptui.errors.ConfigError`, which the CLI reports with
    exit code 2.
    """
    config = load_config(args.hosts)
    if args.json:
        write_json(config_to_dict(config), sys.stdout)
    else:
        sys.stdout.write(config_to_toml(config))
    return 0
