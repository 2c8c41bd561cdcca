"""A bare SEED learner process for the tests that stop it (SIGSTOP): an inference server with a 4 -> 2 linear
Q network for one actor on shared memory (id 0) and one remote actor (id 1) on 127.0.0.1, no training.

    python -m tests.helpers.seed_learner SOCKET_PATH ACTOR_TIMEOUT   (the run secret in $DING_RUN_SECRET)

Prints ``listening <socket path> <remote address>``, then ``served`` once both actors were answered 5 times;
runs until SIGTERM or its stdin closes.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from ding.worker.async_actor.queues import StagingQueue, TrajectoryQueue
from ding.worker.seed.acting import BatchActing, QNetActing
from ding.worker.seed.assembly import TransitionAssembler
from ding.worker.seed.server import InferenceServer
from ding.worker.seed.transport import RUN_SECRET_ENV, SlotLayout

ENVS = 4
LAYOUT = SlotLayout(ENVS, (4,), 2)


class LinearQ(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(4, 2)

    def forward(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {'logit': self.head(obs)}


def main(socket_path: str, actor_timeout: float) -> None:
    qnet = QNetActing(LinearQ())
    staging = StagingQueue(1)
    staging.publish(0, qnet.actor_weights())
    queue: TrajectoryQueue = TrajectoryQueue(1_000_000)
    sink = TransitionAssembler(1_000_000, LAYOUT, queue)  # chunks never fill: nothing to drain
    server = InferenceServer(
        socket_path, os.environ[RUN_SECRET_ENV], LAYOUT, 1, BatchActing(qnet, staging), sink, 8, 1000,
        actor_timeout, listen='127.0.0.1:0', remote_actor_num=1,
    )  # fmt: skip
    server.start()
    try:
        print('listening', socket_path, server.remote_address, flush=True)
        while min(server.stats.requests_of(0), server.stats.requests_of(1)) < 5:
            time.sleep(0.02)
        print('served', flush=True)
        sys.stdin.read()  # until the test closes it (or SIGTERM)
    finally:
        server.stop()
        queue.close()


if __name__ == '__main__':
    main(sys.argv[1], float(sys.argv[2]))
