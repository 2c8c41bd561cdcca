"""Environments: the ``BaseEnv`` interface, the gymnasium adapter and the vectorised env managers.
gymnasium itself is imported only when a gymnasium env is built."""

from .env import BaseEnv, BaseEnvTimestep, DingEnvWrapper, get_env_cls, get_vec_env_setting
from .env_manager import BaseEnvManager, EnvState, SubprocessEnvManager, create_env_manager, get_env_manager_cls
