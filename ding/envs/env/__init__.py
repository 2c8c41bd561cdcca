from .base_env import BaseEnv, BaseEnvTimestep
from .ding_env_wrapper import DingEnvWrapper
from .env_setting import get_env_cls, get_vec_env_setting
from .gymnasium_env import GymnasiumEnv
