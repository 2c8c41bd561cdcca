"""Vectorised envs for the async pipeline: ``make_vector_env`` builds an EnvPool batch (``ding[envpool]``) or a
gymnasium vector env, both with the ``VectorEnv`` interface of ``ding.worker.async_actor.protocol``."""

from .envpool_env import ENVPOOL_MISSING, EnvPoolVectorEnv, envpool_ships
from .factory import VectorEnvType, choose_backend, make_vector_env
from .gymnasium_env import GymnasiumVectorEnv
from .settings import ATARI_DEFAULTS, VectorEnvSettings, WrapperSpec, envpool_task_id, is_atari_id, read_settings
from .wrappers import WRAPPERS, EpisodicLife
