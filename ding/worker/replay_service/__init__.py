"""The replay service (``ding replay-server``) and the learner's and collectors' side of it (docs/replay.md)."""

from .remote_buffer import RemoteReplayBuffer, check_replay_client_config
from .server import ReplayServer, ReplayServicer, TokenInterceptor
