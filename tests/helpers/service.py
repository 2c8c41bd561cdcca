"""Real objects for the service tests: a small DQN policy, its training batches, a learner and an HTTP session."""

import threading
from collections.abc import Callable
from typing import Any

import requests
import torch

from ding.policy import DQNPolicy

MODEL = dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[16, 16])


def make_dqn_policy(seed: int = 0, **learn: Any) -> DQNPolicy:
    torch.manual_seed(seed)
    cfg = dict(type='dqn', model=dict(MODEL), learn=dict(dict(batch_size=8, learning_rate=0.001), **learn))
    return DQNPolicy(cfg, enable_field=['learn', 'collect', 'eval'])


def make_batch(it: int, n: int = 8, collect_iter: int = 0) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(it)
    return [
        {
            'obs': torch.randn(4, generator=g),
            'next_obs': torch.randn(4, generator=g),
            'action': torch.randint(0, 2, (), generator=g),
            'reward': torch.rand((), generator=g),
            'done': False,
            'collect_iter': collect_iter,
        }
        for _ in range(n)
    ]


def learner_cfg(**hook: Any) -> dict[str, Any]:
    """A learner config with every built-in hook off except those given."""
    base = dict(load_ckpt_before_run='', log_show_after_iter=0, save_ckpt_after_iter=0, save_ckpt_after_run=False)
    base.update(hook)
    return dict(hook=base, nan_guard=dict(enable=False))


def session() -> requests.Session:
    s = requests.Session()
    s.trust_env = False  # never through an environment proxy
    return s


class TrainLoop:
    """Calls ``step(i)`` in a thread until stopped (or ``step`` returns False); ``iterations`` counts calls."""

    def __init__(self, step: Callable[[int], Any]) -> None:
        self._step = step
        self.iterations = 0
        self.error: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._step(self.iterations) is False:
                    return
                self.iterations += 1
        except BaseException as exc:  # reported to the test by stop()
            self.error = exc

    def start(self) -> 'TrainLoop':
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error
