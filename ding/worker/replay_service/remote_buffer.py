"""A replay service seen as a buffer: ``RemoteReplayBuffer`` offers ``push`` / ``sample`` / ``update`` like the
in-process buffers, so the serial pipeline and ``ding learner`` use a replay server when
``policy.other.replay_buffer.replay_address`` is set (docs/replay.md).

``push`` inserts through the service, retrying until it succeeds (nothing is dropped during an outage);
``sample`` takes a batch the prefetcher decoded ahead (waiting at most ``sample_wait`` seconds, else None): a
collated batch (a dict of stacked tensors, which every learn mode takes) rather than a list of sample dicts;
``update`` sends priorities back from a thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from easydict import EasyDict

from ding.config.errors import ConfigError
from ding.interaction.base.auth import RUN_SECRET_ENV, resolve_run_secret
from ding.interaction.replay.client import PrioritySender, ReplayClient, insert_with_retry
from ding.interaction.replay.codec import Encoding
from ding.interaction.replay.prefetch import BatchPrefetcher


def replay_secret() -> str:
    """The run secret the replay token derives from (``$DING_RUN_SECRET``); ``ConfigError`` when unset."""
    try:
        secret = resolve_run_secret(None)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if secret is None:
        raise ConfigError(f'the replay service needs the run secret: set ${RUN_SECRET_ENV} (the same as the server)')
    return secret


class RemoteReplayBuffer:
    """The buffer interface over a replay service. ``observe(status, seconds)`` is told of every sample call
    and ``on_state(before, after)`` of the prefetcher's state changes (``ding.interaction.replay.prefetch``); ``on_insert_retry(failures,
    error)`` of every failed insert that will be retried."""

    def __init__(
        self,
        cfg: Mapping[str, Any],
        batch_size: int,
        secret: str,
        expected: Encoding | None = None,
        observe: Callable[[str, float], None] | None = None,
        on_state: Callable[[str, str], None] | None = None,
        on_insert_retry: Callable[[int, str], None] | None = None,
    ) -> None:
        self.cfg = EasyDict(dict(cfg))
        self.client = ReplayClient(self.cfg.replay_address, secret, timeout=float(self.cfg.replay_timeout))
        self._learner_iter = -1
        self.prefetcher = BatchPrefetcher(
            self.client,
            batch_size,
            prefetch_depth=int(self.cfg.prefetch_depth),
            learner_iter=lambda: self._learner_iter,
            expected=expected,
            degraded_after=int(self.cfg.degraded_after),
            observe=observe,
            on_state=on_state,
        )
        self._priorities: PrioritySender | None = None
        self._closed = threading.Event()
        self._on_insert_retry = on_insert_retry
        self._push_count = 0
        self._count = 0
        self.wait_seconds = 0.0  # time `sample` spent waiting for a batch (the learner's wait)

    @property
    def address(self) -> str:
        return self.client.address

    @property
    def state(self) -> str:
        return self.prefetcher.state

    @property
    def push_count(self) -> int:
        return self._push_count

    def push(self, data: list[dict] | dict, cur_collector_envstep: int = -1) -> None:
        items = [data] if isinstance(data, dict) else list(data)
        if not items:
            return
        answer = insert_with_retry(
            self.client, items, cur_collector_envstep, self._closed, on_retry=self._on_insert_retry
        )
        if answer is not None:
            self._push_count += len(items)
            self._count = int(answer.count)

    def sample(
        self, size: int, cur_learner_iter: int = -1, sample_range: slice | None = None, replace: bool = False
    ) -> dict[str, Any] | None:
        if sample_range is not None:
            raise ValueError('RemoteReplayBuffer.sample: sample_range is not offered by the replay service')
        self._learner_iter = int(cur_learner_iter)
        self.prefetcher.batch_size = int(size)  # a tuned batch size applies from the next call on
        self.prefetcher.start()
        t0 = time.perf_counter()
        batch = self.prefetcher.get(timeout=float(self.cfg.sample_wait))
        self.wait_seconds += time.perf_counter() - t0
        if batch is None or batch.size != size:
            return None
        return batch.data

    def update(self, info: dict[str, list[Any]]) -> None:
        if self._priorities is None:
            self._priorities = PrioritySender(self.client)
        self._priorities.send(info)

    def count(self) -> int:
        """Items the service held at the last insert (the service's own count is in its Status)."""
        return self._count

    def __len__(self) -> int:
        return self._count

    def clear(self) -> None:
        """The data belongs to the replay server: nothing to clear here."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The replay server keeps its own state."""

    def start(self) -> None:
        self.prefetcher.start()

    def close(self) -> None:
        self._closed.set()
        self.prefetcher.close()
        if self._priorities is not None:
            self._priorities.close()
        self.client.close()


__all__ = ['RemoteReplayBuffer', 'replay_secret']
