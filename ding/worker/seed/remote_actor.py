"""``ding seed-actor``: a SEED actor on another host, joining a learner that listens (``policy.seed.listen``).

    ding seed-actor --connect HOST:PORT --token TOKEN --actor-id I -c cfg.py [--seed S]

The env comes from the run's config file on this host (its ``env`` section and ``policy.seed.env_per_actor`` /
``actor_timeout``), never from the network; an ``env_id`` naming a module to import (``'module:Env'``) is
refused. The token is the learner's run secret (``$DING_RUN_SECRET`` there; here ``--token`` or the same
variable). Actor ids of remote actors follow the local ones: ``actor_num ... actor_num + remote_actor_num - 1``.
Exit codes as ``actor_main``'s: 0 when the learner ends, drops this actor or stays silent ``actor_timeout``
seconds; 2 on bad arguments or config; 3 when the join is refused or the learner is unreachable.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Mapping
from typing import Any

from ding.config import ConfigError, read_config

from .actor_main import LearnerLink, step_with_learner
from .config import SEED_DEFAULTS
from .remote import RemoteActorClient
from .transport import RUN_SECRET_ENV, SlotLayout, parse_address


def actor_settings(main_cfg: Mapping[str, Any], path: str) -> tuple[dict[str, Any], int, float]:
    """``(env section, envs per actor, actor_timeout)`` of a run's config; ``ValueError`` naming the key."""
    env_cfg = main_cfg.get('env')
    if not isinstance(env_cfg, Mapping) or not isinstance(env_cfg.get('env_id'), str) or not env_cfg['env_id']:
        raise ValueError(f'{path}: env.env_id is missing (the gymnasium / EnvPool id the actors step)')
    if ':' in env_cfg['env_id']:
        raise ValueError(
            f'{path}: env.env_id {env_cfg["env_id"]!r} names a module to import; a remote actor refuses it'
        )
    seed_cfg = {**SEED_DEFAULTS, **((main_cfg.get('policy') or {}).get('seed') or {})}
    n_envs, timeout = seed_cfg['env_per_actor'], seed_cfg['actor_timeout']
    if isinstance(n_envs, bool) or not isinstance(n_envs, int) or not 1 <= n_envs < 2**16:
        raise ValueError(f'{path}: policy.seed.env_per_actor must be an int in [1, 65535], got {n_envs!r}')
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f'{path}: policy.seed.actor_timeout must be a positive number, got {timeout!r}')
    return dict(env_cfg), n_envs, float(timeout)


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # unwinds through the step loop's finally: the envs and the socket are closed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='ding seed-actor', description=__doc__.split('\n\n')[0])
    parser.add_argument('--connect', required=True, metavar='HOST:PORT', help="the learner's policy.seed.listen")
    parser.add_argument('--token', help=f'the run secret (default: ${RUN_SECRET_ENV}); prefer the variable')
    parser.add_argument('--actor-id', type=int, required=True)
    parser.add_argument('-c', '--config', required=True, help="the run's config file (its env section)")
    parser.add_argument('--seed', type=int, default=0, help="the run's seed: envs seeded from seed + id * envs")
    args = parser.parse_args(argv)
    try:
        parse_address(args.connect, '--connect')
    except ValueError as exc:
        parser.error(str(exc))
    secret = (args.token or os.environ.get(RUN_SECRET_ENV, '')).strip()
    if not secret:
        parser.error(f"no token: give --token or set ${RUN_SECRET_ENV} (the learner's run secret)")
    if not os.path.isfile(args.config):
        parser.error(f"config file '{args.config}' not found")
    try:
        env_cfg, n_envs, timeout = actor_settings(read_config(args.config)[0], args.config)
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
    signal.signal(signal.SIGTERM, _terminate)

    def connect(layout: SlotLayout) -> LearnerLink:
        return RemoteActorClient(args.connect, secret, args.actor_id, layout, timeout)

    seed = args.seed + args.actor_id * n_envs
    return step_with_learner(connect, args.connect, args.actor_id, env_cfg, n_envs, seed)


__all__ = ['actor_settings', 'main']
