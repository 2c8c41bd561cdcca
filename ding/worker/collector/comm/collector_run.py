"""One task of the flask_fs comm collector (``CollectorRun``): its parallel collector, the queue of sample
metadata waiting for the coordinator, where its sample files go, and the answer once it ended."""

from __future__ import annotations

import queue
import threading
from typing import Any

from ding.interaction import TaskFail
from ding.utils.atomic_file import STORAGE_REFUSAL

from .utils import remove_sample_files


class CollectorRun:
    """One collector task: its parallel collector, the queue of metadata chunks, where its files go."""

    def __init__(self, task_id: str, collector: Any, path_data: str, prefix: str, queue_size: int) -> None:
        self.task_id = task_id
        self.collector = collector
        self.path_data = path_data
        self.prefix = prefix
        self.queue: queue.Queue[list[dict[str, Any]]] = queue.Queue(maxsize=queue_size)
        self.ending = threading.Event()  # set: closed (or the coordinator is gone); nothing more is sent
        self.reason = ''
        self.sent_samples = 0  # metadata handed to the coordinator
        self.dropped_samples = 0  # written but never handed over (task closed first); their files are removed
        self.storage_error: str | None = None  # a sample file the disk refused: the task ends with it (not retried)
        self.replay: Any = None  # a RemoteReplayBuffer when the policy config names a replay_address

    def close_replay(self) -> None:
        """Stop inserting (an insert waiting out an outage gives up) and close the replay client."""
        if self.replay is not None:
            self.replay.close()

    def discard_queued(self) -> None:
        """Remove the files of chunks the coordinator never received."""
        while True:
            try:
                chunk = self.queue.get_nowait()
            except queue.Empty:
                return
            self.drop(chunk)

    def drop(self, chunk: list[dict[str, Any]]) -> None:
        self.dropped_samples += len(chunk)
        remove_sample_files(self.path_data, [m['data_id'] for m in chunk])

    def hand_over(self, chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``chunk`` and every chunk queued behind it, as one list counted as handed to the coordinator."""
        data = chunk
        while True:
            try:
                data.extend(self.queue.get_nowait())
            except queue.Empty:
                break
        self.sent_samples += len(data)
        return data

    def finish_answer(self) -> dict[str, Any]:
        """The finish info of the ended task; fails naming the directory (storage) or the collector's error."""
        collector = self.collector
        if self.storage_error is not None:  # the coordinator ends the run naming the directory
            raise TaskFail(
                {'task_id': self.task_id, STORAGE_REFUSAL: True}, f'collector task {self.task_id}: {self.storage_error}'
            )
        if collector.error is not None:
            raise TaskFail(
                {'task_id': self.task_id, 'error': collector.error},
                f'collector task {self.task_id} failed: {collector.error}',
            )
        return {'task_id': self.task_id, 'finish_info': collector.get_finish_info()}
