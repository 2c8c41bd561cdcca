"""Learner overhead: ``BaseLearner.train()`` with the default hooks against a raw PyTorch loop that does
the same double-DQN update (3-layer MLP Q-net, target net, Adam, batch 64, obs 4 / actions 2) on the
same pre-collated batch, one torch thread, runs interleaved, median of several runs.

    python benchmarks/learner_overhead.py [--seconds 1.0] [--rounds 9]

Each run lasts about ``--seconds`` (iterations calibrated on the raw loop), so the benchmark takes about
2 x rounds x seconds plus ~10 s. Prints both iteration rates, their ratio (target: learner >= 0.97 x raw),
and the learner's own cost per iteration measured around a no-op update (steadier on a busy machine).
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault('DING_QUIET', '1')  # keep the learner's log table off the console

OBS_DIM, ACT_DIM, BATCH = 4, 2, 64
GAMMA, LR, TARGET_UPDATE_FREQ = 0.99, 1e-3, 100


class DQNState:
    """Online net, target net, optimizer and update counter of one DQN learner."""

    def __init__(self, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(OBS_DIM, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                   nn.Linear(64, ACT_DIM))
        self.target = copy.deepcopy(self.model)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=LR)
        self.updates = 0


def dqn_update(s: DQNState, batch: Dict[str, torch.Tensor]) -> Dict[str, Any]:
    """One double-DQN step; returns what a DQN policy reports (loss, q value, per-sample priority)."""
    q = s.model(batch['obs'])
    q_taken = q.gather(1, batch['action'].unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        next_action = s.model(batch['next_obs']).argmax(dim=1, keepdim=True)
        next_q = s.target(batch['next_obs']).gather(1, next_action).squeeze(1)
        target_q = batch['reward'] + GAMMA * (1.0 - batch['done'].float()) * next_q
    td = q_taken - target_q
    loss = F.smooth_l1_loss(q_taken, target_q)
    s.optimizer.zero_grad()
    loss.backward()
    s.optimizer.step()
    s.updates += 1
    if s.updates % TARGET_UPDATE_FREQ == 0:
        s.target.load_state_dict(s.model.state_dict())
    return {'cur_lr': LR, 'total_loss': loss.item(), 'q_value': q_taken.mean().item(),
            'priority': td.detach().abs().tolist()}


def make_batch() -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        'obs': torch.randn(BATCH, OBS_DIM, generator=g),
        'next_obs': torch.randn(BATCH, OBS_DIM, generator=g),
        'action': torch.randint(0, ACT_DIM, (BATCH, ), generator=g),
        'reward': torch.rand(BATCH, generator=g),
        'done': torch.rand(BATCH, generator=g) < 0.05,
    }


def make_learner(update: Callable[[DQNState, Dict[str, torch.Tensor]], Dict[str, Any]], exp_name: str) -> Any:
    """A ``BaseLearner`` with the default config around a DQN-like policy whose learn step is ``update``."""
    from ding.policy.base_policy import Policy
    from ding.worker.learner import BaseLearner

    class BenchDQNPolicy(Policy):
        """DQN-like policy (learn mode only)."""

        def _create_model(self, cfg, model):
            self._dqn = DQNState(seed=0)
            return self._dqn.model

        def _init_learn(self):
            self._batch_size = BATCH
            self._optimizer = self._dqn.optimizer

        def _forward_learn(self, data):
            return update(self._dqn, data)

        def _monitor_vars_learn(self):
            return ['cur_lr', 'total_loss', 'q_value']

        def _init_collect(self): pass
        def _init_eval(self): pass
        def _forward_collect(self, data, **kwargs): raise NotImplementedError
        def _forward_eval(self, data): raise NotImplementedError
        def _process_transition(self, obs, policy_output, timestep): raise NotImplementedError
        def _get_train_sample(self, transitions): raise NotImplementedError

    policy = BenchDQNPolicy(BenchDQNPolicy.default_config(), enable_field=['learn'])
    # The default learner config: log show every 100 iterations, checkpoint every 10000.
    return BaseLearner(BaseLearner.default_config(), policy.learn_mode, exp_name=exp_name)


_NOOP_RESULT = {'cur_lr': LR, 'total_loss': 0.5, 'q_value': 1.0, 'priority': [0.1] * BATCH}


def noop_update(s: DQNState, batch: Dict[str, torch.Tensor]) -> Dict[str, Any]:
    """What ``dqn_update`` returns, without the compute: isolates the learner's own cost."""
    return dict(_NOOP_RESULT)


def run_raw(update: Callable, state: DQNState, batch: Dict[str, torch.Tensor], iters: int) -> float:
    """Seconds per iteration of a plain loop over ``update``."""
    start = time.perf_counter()
    for _ in range(iters):
        update(state, batch)
    return (time.perf_counter() - start) / iters


def run_learner(learner: Any, batch: Dict[str, torch.Tensor], iters: int) -> float:
    """Seconds per iteration of ``learner.train`` (env step passed, as the serial pipeline does)."""
    train = learner.train
    step = learner.train_iter
    start = time.perf_counter()
    for i in range(iters):
        train(batch, step + i)
    return (time.perf_counter() - start) / iters


def interleaved(raw: Callable[[], float], lrn: Callable[[], float], rounds: int) -> Tuple[List[float], List[float]]:
    """Per-iteration times of ``rounds`` runs each, alternating which variant goes first."""
    raw_t, lrn_t = [], []
    for r in range(rounds):
        if r % 2 == 0:
            raw_t.append(raw())
            lrn_t.append(lrn())
        else:
            lrn_t.append(lrn())
            raw_t.append(raw())
    return raw_t, lrn_t


def table(rows: List[Tuple[str, ...]], head: Tuple[str, ...]) -> str:
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    rule = '-+-'.join('-' * w for w in widths)
    fmt = lambda r: ' | '.join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return '\n'.join([rule, fmt(head), rule] + [fmt(r) for r in rows] + [rule])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seconds', type=float, default=1.0, help='target length of one DQN run')
    parser.add_argument('--rounds', type=int, default=9, help='interleaved rounds (runs per variant)')
    args = parser.parse_args()
    torch.set_num_threads(1)
    batch = make_batch()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the learners write ./{exp_name}/{log,ckpt}
        learner = make_learner(dqn_update, 'learner_overhead')
        noop_learner = make_learner(noop_update, 'learner_overhead_noop')
        try:
            raw_state = DQNState(seed=0)
            # Warm-up (allocator, first log show, which creates the tensorboard writer) and calibration.
            run_learner(learner, batch, 200)
            run_learner(noop_learner, batch, 200)
            iters = max(100, int(args.seconds / run_raw(dqn_update, raw_state, batch, 200)))
            raw_t, lrn_t = interleaved(lambda: run_raw(dqn_update, raw_state, batch, iters),
                                       lambda: run_learner(learner, batch, iters), args.rounds)
            # The learner's own cost per iteration: the same loop around an update that does no compute.
            noop_raw, noop_lrn = interleaved(lambda: run_raw(noop_update, raw_state, batch, 20000),
                                             lambda: run_learner(noop_learner, batch, 20000), 7)
            hooks = ', '.join(h.name for hs in learner.hooks.values() for h in hs)
        finally:
            learner.close()
            noop_learner.close()
            os.chdir(ROOT)
    total = time.perf_counter() - started

    raw_med, lrn_med = statistics.median(raw_t), statistics.median(lrn_t)
    paired = statistics.median(r / l for r, l in zip(raw_t, lrn_t))
    overhead = min(noop_lrn) - min(noop_raw)
    implied = min(raw_t) / (min(raw_t) + overhead)
    print(f'learner overhead: double DQN update (3-layer MLP, target net, Adam), batch {BATCH}, obs {OBS_DIM}, '
          f'actions {ACT_DIM}, 1 torch thread; {args.rounds} interleaved runs x {iters} iterations per variant; '
          f'{total:.0f} s in all')
    print(f'learner hooks (default config): {hooks}')
    rows = [
        ('raw PyTorch loop', f'{1 / raw_med:,.0f}', f'{1 / min(raw_t):,.0f}', f'{raw_med * 1e6:,.1f}'),
        ('BaseLearner.train', f'{1 / lrn_med:,.0f}', f'{1 / min(lrn_t):,.0f}', f'{lrn_med * 1e6:,.1f}'),
    ]
    print(table(rows, ('variant', 'it/s (median)', 'it/s (best run)', 'us/it (median)')))
    ratio = raw_med / lrn_med
    print(f'ratio learner/raw: {ratio:.3f} (of medians), {paired:.3f} (median of per-run ratios); '
          f'target >= 0.97: {"OK" if ratio >= 0.97 else "BELOW TARGET"}')
    print(f'learner cost per iteration, measured around a no-op update (best of 7 x 20000): {overhead * 1e6:.1f} us '
          f'-> implied ratio at the best raw DQN speed: {implied:.3f}')
    if max(raw_t) > 1.3 * min(raw_t):
        print(f'note: raw runs varied {max(raw_t) / min(raw_t):.2f}x between runs (a busy machine?); '
              f'the medians are uncertain by about as much')


if __name__ == '__main__':
    main()
