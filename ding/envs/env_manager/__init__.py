from .base_env_manager import BaseEnvManager, EnvState
from .env_manager_factory import create_env_manager, get_env_manager_cls
from .subprocess_env_manager import SubprocessEnvManager
