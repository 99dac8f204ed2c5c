"""The hosts file: its schema (:mod:`.model`), loading (:mod:`.load`) and rendering.

Other layers import from here: ``from ddptui.config import Config, load_config``.
"""

from __future__ import annotations

from ddptui.config.load import (
    CLUSTER_KEYS,
    HOST_KEYS,
    JOB_KEYS,
    RECOVERY_KEYS,
    SLURM_KEYS,
    load_config,
    parse_config,
)
from ddptui.config.model import (
    AUTO,
    Backend,
    ClusterConfig,
    Config,
    GpuSelection,
    HostConfig,
    JobConfig,
    MasterPort,
    ProcsPerNode,
    RecoveryConfig,
    RecoveryMode,
    SlurmConfig,
)
from ddptui.config.render import config_to_dict, config_to_toml
from ddptui.config.starter import starter_text

__all__ = [
    "AUTO",
    "CLUSTER_KEYS",
    "HOST_KEYS",
    "JOB_KEYS",
    "RECOVERY_KEYS",
    "SLURM_KEYS",
    "Backend",
    "ClusterConfig",
    "Config",
    "GpuSelection",
    "HostConfig",
    "JobConfig",
    "MasterPort",
    "ProcsPerNode",
    "RecoveryConfig",
    "RecoveryMode",
    "SlurmConfig",
    "config_to_dict",
    "config_to_toml",
    "load_config",
    "parse_config",
    "starter_text",
]
