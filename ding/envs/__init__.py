"""Environments: the ``BaseEnv`` interface, the gymnasium adapter, the generic ``gymnasium`` env type and the
env managers."""

from .env import BaseEnv, BaseEnvTimestep, DingEnvWrapper, GymnasiumEnv, get_env_cls, get_vec_env_setting
from .env_manager import (
    AsyncSubprocessEnvManager,
    BaseEnvManager,
    EnvState,
    SubprocessEnvManager,
    create_env_manager,
    get_env_manager_cls,
)
