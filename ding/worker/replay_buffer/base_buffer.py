"""The replay buffer interface, the shared bookkeeping (logging, throughput report) and the factory."""

from __future__ import annotations

import copy
import os
import time
from abc import ABC, abstractmethod
from typing import Any

from easydict import EasyDict

from ding.utils.log_helper import build_logger, close_logger
from ding.utils.registry import BUFFER_REGISTRY, import_module

from .utils import deep_merge_dicts


class IBuffer(ABC):
    """What every replay buffer offers to the serial and parallel pipelines.

    ``push`` stores dicts, ``sample`` returns a list of shallow copies of stored dicts (each with
    ``replay_unique_id`` and ``replay_buffer_idx``) or None when it cannot serve the request,
    ``update`` applies new priorities (no-op for non-prioritized buffers).
    """

    config: dict[str, Any] = {}
    # set by each implementation's constructor / load_state_dict
    _replay_buffer_size: int
    _push_count: int

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def __init__(
        self,
        cfg: dict | None = None,
        tb_logger: Any | None = None,
        exp_name: str = 'default_experiment',
        instance_name: str = 'buffer',
    ) -> None:
        # Partial configs are completed with the class defaults so a bare ``dict(replay_buffer_size=..)`` works.
        self._cfg = deep_merge_dicts(self.default_config(), cfg)
        self._exp_name = exp_name
        self._instance_name = instance_name
        self._tb_logger = tb_logger  # used when given; a buffer never opens a writer of its own
        self._logger = None
        self._thruput_period = float(self._cfg.get('periodic_thruput_seconds', 60) or 0)
        self._thruput_last = time.monotonic()
        self._thruput_counts = {'push': 0, 'sample': 0, 'remove': 0}
        self._thruput_step = 0

    # ---- interface ---------------------------------------------------------------------------
    @abstractmethod
    def push(self, data: list[dict] | dict, cur_collector_envstep: int = -1) -> None: ...

    @abstractmethod
    def sample(
        self, size: int, cur_learner_iter: int, sample_range: slice | None = None, replace: bool = False
    ) -> list[dict] | None: ...

    @abstractmethod
    def update(self, info: dict[str, list[Any]]) -> None: ...

    @abstractmethod
    def clear(self) -> None: ...

    @abstractmethod
    def count(self) -> int: ...

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def start(self) -> None:
        """Nothing runs in the background: the throughput report piggybacks on push/sample calls."""
        self._thruput_last = time.monotonic()

    def close(self) -> None:
        """Empty the buffer and release its text logger."""
        self.clear()
        if self._logger is not None:
            close_logger(self._logger)
            self._logger = None
        if self._tb_logger is not None:
            self._tb_logger.flush()  # shared writer: its owner closes it

    def __len__(self) -> int:
        return self.count()

    @property
    def replay_buffer_size(self) -> int:
        return self._replay_buffer_size

    @property
    def push_count(self) -> int:
        return self._push_count

    # ---- logging -------------------------------------------------------------------------------
    @property
    def logger(self):
        """Text logger, built on first use so a buffer that never reports writes no files."""
        if self._logger is None:
            path = os.path.join('.', self._exp_name, 'log', self._instance_name)
            self._logger, _ = build_logger(path, self._instance_name, need_tb=False)
        return self._logger

    def _count_thruput(self, kind: str, n: int) -> None:
        """Count pushed/sampled/removed items; every ``periodic_thruput_seconds`` log the rates."""
        self._thruput_counts[kind] += n
        if self._thruput_period <= 0:
            return
        now = time.monotonic()
        elapsed = now - self._thruput_last
        if elapsed < self._thruput_period:
            return
        rates = {f'{k}_per_sec': v / elapsed for k, v in self._thruput_counts.items()}
        rates['valid_count'] = self.count()
        logger = self.logger
        logger.info(
            f'[{self._instance_name}] throughput over {elapsed:.1f}s: '
            + ', '.join(f'{k}={v:.2f}' for k, v in rates.items())
        )
        if self._tb_logger is not None:
            for k, v in rates.items():
                self._tb_logger.add_scalar(f'{self._instance_name}_sec/{k}', v, self._thruput_step)
        self._thruput_step += 1
        self._thruput_last = now
        self._thruput_counts = dict.fromkeys(self._thruput_counts, 0)


def _cfg_type(cfg: dict) -> str:
    if 'type' not in cfg:
        raise KeyError(f"replay buffer config needs a 'type' (one of {BUFFER_REGISTRY.query()}), got keys {list(cfg)}")
    return cfg['type']


def get_buffer_cls(cfg: dict) -> type:
    """The buffer class named by ``cfg.type`` (after importing ``cfg.import_names``)."""
    import_module(cfg.get('import_names', []))
    return BUFFER_REGISTRY.get_cls(_cfg_type(cfg))


def create_buffer(cfg: dict, *args: Any, **kwargs: Any) -> IBuffer:
    """Build the buffer named by ``cfg.type``: ``create_buffer(cfg, tb_logger=.., exp_name=..)``."""
    cfg = EasyDict(cfg)
    return get_buffer_cls(cfg)(cfg, *args, **kwargs)
