"""The Sebulba notes' actor-cycle benchmark: preallocated trajectory buffers against allocating per step.

A simple policy-gradient agent (an MLP of 5 hidden layers of 200, a categorical policy), CartPole with 16 envs
(EnvPool), inference on, 20 cycles of 100 steps, through the async actor's own cycle (``EnvGroup`` and
``UnrollWriter`` of ``ding.worker.async_actor``; one env group, buffers recycled as the learner would release them).
The notes measured 1.37x from buffer donation in their JAX version.

    python benchmarks/actor_cycle.py [--repeats 5] [--cycles 20] [--steps 100] [--envs 16]

Prints env steps per second of wall time and per second of this process's CPU time (steadier on a busy
machine), each the median of the repeats (the two modes interleaved), and their ratios.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from typing import Any

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ding.envs.vector import make_vector_env  # noqa: E402
from ding.worker.async_actor import EnvGroup, UnrollWriter  # noqa: E402


class SimplePolicyGradient:
    """The notes' agent as an ``AsyncActorPolicy``: MLP logits, sampled actions, no recurrent state."""

    def __init__(self, obs_size: int, action_num: int, hidden: int = 200, layers: int = 5) -> None:
        sizes = [obs_size] + [hidden] * layers
        blocks: list[nn.Module] = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            blocks += [nn.Linear(n_in, n_out), nn.ReLU()]
        self.model = nn.Sequential(*blocks, nn.Linear(hidden, action_num))

    def actor_model(self) -> nn.Module:
        return copy.deepcopy(self.model).eval().requires_grad_(False)

    def actor_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def initial_actor_state(self, batch_size: int) -> Any:
        return None

    def actor_step(
        self, model: nn.Module, obs: torch.Tensor, state: Any, first: torch.Tensor, greedy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        logit = model(obs)
        action = logit.argmax(-1) if greedy else torch.multinomial(torch.softmax(logit, -1), 1).squeeze(-1)
        return action, logit, None


def cycle_rate(allocate_per_step: bool, num_envs: int, cycles: int, steps: int) -> tuple[float, float]:
    """(env steps per wall second, per CPU second of this process) over ``cycles`` cycles after a warm-up one."""
    env = make_vector_env(dict(env_id='CartPole-v1'), num_envs, seed=0)
    policy = SimplePolicyGradient(env.observation_shape[0], env.action_num)
    model = policy.actor_model()
    group = EnvGroup(env, policy, seed=0)
    writer = UnrollWriter([group], steps, allocate_per_step=allocate_per_step)
    try:
        for cycle in range(cycles + 1):  # the first cycle warms up (and allocates the preallocated buffers)
            if cycle == 1:
                start, start_cpu = time.perf_counter(), time.process_time()
            writer.collect(model, version=0).release()  # the learner would release it
        env_steps = cycles * steps * num_envs
        return env_steps / (time.perf_counter() - start), env_steps / (time.process_time() - start_cpu)
    finally:
        group.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--cycles', type=int, default=20)
    parser.add_argument('--steps', type=int, default=100)
    parser.add_argument('--envs', type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rates: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.repeats):  # interleaved so drift in machine load hits both alike
        for per_step in (False, True):
            rates[per_step].append(cycle_rate(per_step, args.envs, args.cycles, args.steps))
    medians = {k: [statistics.median(r[i] for r in runs) for i in (0, 1)] for k, runs in rates.items()}
    print(f'{args.cycles} cycles x {args.steps} steps, {args.envs} CartPole envs, MLP 5 x 200, inference on')
    print(f'{"trajectory buffers":<22} {"steps/wall s":>13} {"steps/CPU s":>12}  (medians of {args.repeats}) wall runs')
    print('-' * 90)
    for name, per_step in (('preallocated', False), ('allocated per step', True)):
        wall, cpu = medians[per_step]
        runs = ' '.join(f'{r[0]:.0f}' for r in rates[per_step])
        print(f'{name:<22} {wall:>13.0f} {cpu:>12.0f}  {runs}')
    print('-' * 90)
    ratio_wall, ratio_cpu = (medians[False][i] / medians[True][i] for i in (0, 1))
    print(f'preallocated / per step: {ratio_wall:.2f} (wall), {ratio_cpu:.2f} (CPU)   (the notes: 1.37 in JAX)')


if __name__ == '__main__':
    main()
