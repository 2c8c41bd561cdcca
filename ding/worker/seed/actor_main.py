"""A SEED actor process: steps a vectorised env, sends each step's observations to the learner's inference
server and steps with the actions it answers. No torch here (numpy, gymnasium / EnvPool): it starts fast.

``python -m ding.worker.seed.actor_main --socket PATH --actor-id I --envs N --seed S --env JSON [--timeout T]``,
with the run secret in ``$DING_RUN_SECRET``. Exits 0 when the learner goes away (its socket closes), stays
silent ``--timeout`` seconds (frozen: not even a keep-alive), or on SIGTERM, closing its envs either way; 2 on
bad arguments; 3 when the join is refused or the learner is unreachable. ``step_with_learner`` is also the loop
of a remote actor (``remote_actor``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from ding.envs.vector import make_vector_env

from .transport import RUN_SECRET_ENV, ActorClient, Dropped, LearnerSilent, SlotLayout, TransportError

EXIT_REFUSED = 3
DEFAULT_TIMEOUT = 60.0  # policy.seed.actor_timeout's default


class LearnerLink(Protocol):
    """What an actor needs of its link to the learner (``ActorClient``, ``RemoteActorClient``)."""

    def join(self) -> None: ...

    def request(
        self, obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> np.ndarray: ...

    def close(self) -> None: ...


def log(text: str) -> None:
    print(f'[ding] {text}', file=sys.stderr, flush=True)


def step_with_learner(
    connect: Callable[[SlotLayout], LearnerLink],
    where: str,
    actor_id: int,
    env_cfg: Mapping[str, Any],
    n_envs: int,
    seed: int,
) -> int:
    """Build the envs, join the learner through ``connect(layout)`` and step until it goes away; the exit code."""
    env = make_vector_env(env_cfg, n_envs, seed)
    client: LearnerLink | None = None
    try:
        client = connect(SlotLayout(n_envs, tuple(env.observation_shape), env.action_num))
        try:
            client.join()
        except (TransportError, OSError) as exc:
            log(f'seed actor {actor_id}: cannot join {where}: {exc}')
            return EXIT_REFUSED
        obs = env.reset(seed)
        reward = np.zeros(n_envs, dtype=np.float32)
        terminated = np.zeros(n_envs, dtype=bool)
        truncated = np.zeros(n_envs, dtype=bool)
        while True:
            try:
                action = client.request(obs, reward, terminated, truncated)
            except (LearnerSilent, Dropped) as exc:
                log(f'seed actor {actor_id}: {exc}; exiting')
                return 0
            except TransportError:
                return 0  # the learner stopped (or died): nothing left to do
            obs, reward, terminated, truncated = env.step(action)
    finally:
        if client is not None:
            client.close()
        env.close()


def run_actor(
    socket_path: str,
    secret: str,
    actor_id: int,
    env_cfg: Mapping[str, Any],
    n_envs: int,
    seed: int,
    timeout: float = DEFAULT_TIMEOUT,
) -> int:
    """Join the server on this host and step until it goes away; the exit code."""
    return step_with_learner(
        lambda layout: ActorClient(socket_path, secret, actor_id, layout, timeout),
        socket_path,
        actor_id,
        env_cfg,
        n_envs,
        seed,
    )


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # unwinds through run_actor's finally: the envs are closed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m ding.worker.seed.actor_main', description=__doc__)
    parser.add_argument('--socket', required=True, help="the inference server's Unix socket")
    parser.add_argument('--actor-id', type=int, required=True)
    parser.add_argument('--envs', type=int, required=True, help='envs of this actor (policy.seed.env_per_actor)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--env', required=True, help="the run's env section as JSON")
    parser.add_argument(
        '--timeout',
        type=float,
        default=DEFAULT_TIMEOUT,
        help='exit when the learner sends nothing for this many seconds (policy.seed.actor_timeout)',
    )
    args = parser.parse_args(argv)
    secret = os.environ.get(RUN_SECRET_ENV, '')
    if not secret:
        parser.error(f'${RUN_SECRET_ENV} is not set (the run secret the learner handed its actors)')
    try:
        env_cfg = json.loads(args.env)
    except json.JSONDecodeError as exc:
        parser.error(f'--env is not JSON: {exc}')
    if not isinstance(env_cfg, dict):
        parser.error('--env must be a JSON object (the env section)')
    if not args.timeout > 0:
        parser.error(f'--timeout must be positive, got {args.timeout}')
    signal.signal(signal.SIGTERM, _terminate)
    return run_actor(args.socket, secret, args.actor_id, env_cfg, args.envs, args.seed, args.timeout)


if __name__ == '__main__':
    sys.exit(main())
