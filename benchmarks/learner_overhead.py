"""Learner overhead: ``BaseLearner.train()`` with the default hooks against a raw PyTorch loop that does
the same double-DQN update (3-layer MLP Q-net, target net, Adam, batch 64, obs 4 / actions 2) on the
same pre-collated batch, one torch thread, runs interleaved, median of several runs.

    python benchmarks/learner_overhead.py [--seconds 1.0] [--rounds 9]

Each run lasts about ``--seconds`` (iterations calibrated on the raw loop), so the benchmark takes about
2 x rounds x seconds plus ~10 s. Prints both iteration rates, their ratio (target: learner >= 0.97 x raw),
and the learner's own cost per iteration measured around a no-op update (steadier on a busy machine).

Second comparison (``--part dqn``; ``--part both`` is the default): ``BaseLearner`` around the real DQN learn mode
(``ding.policy.DQNPolicy`` built from ``dizoo/classic_control/cartpole/config/cartpole_dqn_config.py`` through
``compile_config`` with create_config policy type 'dqn', default learner hooks, NaN guard attached by
``before_run``) against a raw loop doing the same double-DQN update on the same ``ding.model.DQN`` (deep-copied
target assigned every ``target_update_freq`` updates, fused ``ding.torch_utils.Adam``, squared TD error), on
CartPole-sized batches of 64. Learner inputs: (a) the pre-collated batch dict the raw loop gets (target >= 0.85 x
raw) and (b) the list of 64 sample dicts a replay buffer returns (collate included; reported separately, next to
a raw loop that stacks the same list itself). Before timing, both sides run 210 updates from the same weights on
the same batch and the weight difference is printed (it should be 0). Rates are given by wall clock and by CPU
time of the process (the steadier one on a shared machine); ``--profile`` prints a cProfile of path (a) first.
Each DQN run does about ``--seconds`` of CPU work (more wall time on a busy machine), so the DQN part takes
about 4 x rounds x seconds plus ~15 s on an idle one.

    python benchmarks/learner_overhead.py --part dqn [--seconds 1.0] [--rounds 9] [--profile]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

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
        self.model = nn.Sequential(
            nn.Linear(OBS_DIM, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, ACT_DIM)
        )
        self.target = copy.deepcopy(self.model)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=LR)
        self.updates = 0


def dqn_update(s: DQNState, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
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
    return {
        'cur_lr': LR,
        'total_loss': loss.item(),
        'q_value': q_taken.mean().item(),
        'priority': td.detach().abs().tolist(),
    }


def make_batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        'obs': torch.randn(BATCH, OBS_DIM, generator=g),
        'next_obs': torch.randn(BATCH, OBS_DIM, generator=g),
        'action': torch.randint(0, ACT_DIM, (BATCH,), generator=g),
        'reward': torch.rand(BATCH, generator=g),
        'done': torch.rand(BATCH, generator=g) < 0.05,
    }


def make_learner(update: Callable[[DQNState, dict[str, torch.Tensor]], dict[str, Any]], exp_name: str) -> Any:
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

        def _init_collect(self):
            pass

        def _init_eval(self):
            pass

        def _forward_collect(self, data, **kwargs):
            raise NotImplementedError

        def _forward_eval(self, data):
            raise NotImplementedError

        def _process_transition(self, obs, policy_output, timestep):
            raise NotImplementedError

        def _get_train_sample(self, transitions):
            raise NotImplementedError

    policy = BenchDQNPolicy(BenchDQNPolicy.default_config(), enable_field=['learn'])
    # The default learner config: log show every 100 iterations, checkpoint every 10000.
    return BaseLearner(BaseLearner.default_config(), policy.learn_mode, exp_name=exp_name)


_NOOP_RESULT = {'cur_lr': LR, 'total_loss': 0.5, 'q_value': 1.0, 'priority': [0.1] * BATCH}


def noop_update(s: DQNState, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What ``dqn_update`` returns, without the compute: isolates the learner's own cost."""
    return dict(_NOOP_RESULT)


def run_raw(update: Callable, state: DQNState, batch: dict[str, torch.Tensor], iters: int) -> float:
    """Seconds per iteration of a plain loop over ``update``."""
    start = time.perf_counter()
    for _ in range(iters):
        update(state, batch)
    return (time.perf_counter() - start) / iters


def run_learner(learner: Any, batch: dict[str, torch.Tensor], iters: int) -> float:
    """Seconds per iteration of ``learner.train`` (env step passed, as the serial pipeline does)."""
    train = learner.train
    step = learner.train_iter
    start = time.perf_counter()
    for i in range(iters):
        train(batch, step + i)
    return (time.perf_counter() - start) / iters


def interleaved(raw: Callable[[], float], lrn: Callable[[], float], rounds: int) -> tuple[list[float], list[float]]:
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


def table(rows: list[tuple[str, ...]], head: tuple[str, ...]) -> str:
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    rule = '-+-'.join('-' * w for w in widths)
    fmt = lambda r: ' | '.join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return '\n'.join([rule, fmt(head), rule] + [fmt(r) for r in rows] + [rule])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seconds', type=float, default=1.0, help='target length of one DQN run')
    parser.add_argument('--rounds', type=int, default=9, help='interleaved rounds (runs per variant)')
    parser.add_argument(
        '--part',
        choices=('simple', 'dqn', 'both'),
        default='both',
        help="'simple': benchmark-local DQN update; 'dqn': ding.policy.DQNPolicy; 'both'",
    )
    parser.add_argument(
        '--profile',
        action='store_true',
        help='(dqn part) print a cProfile of the learner path (a) before the timed runs',
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.part in ('simple', 'both'):
        main_simple(args)
    if args.part in ('dqn', 'both'):
        if args.part == 'both':
            print()
        main_dqn(args)


def main_simple(args: argparse.Namespace) -> None:
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
            raw_t, lrn_t = interleaved(
                lambda: run_raw(dqn_update, raw_state, batch, iters),
                lambda: run_learner(learner, batch, iters),
                args.rounds,
            )
            # The learner's own cost per iteration: the same loop around an update that does no compute.
            noop_raw, noop_lrn = interleaved(
                lambda: run_raw(noop_update, raw_state, batch, 20000),
                lambda: run_learner(noop_learner, batch, 20000),
                7,
            )
            hooks = ', '.join(h.name for hs in learner.hooks.values() for h in hs)
        finally:
            learner.close()
            noop_learner.close()
            os.chdir(ROOT)
    total = time.perf_counter() - started

    raw_med, lrn_med = statistics.median(raw_t), statistics.median(lrn_t)
    paired = statistics.median(raw / lrn for raw, lrn in zip(raw_t, lrn_t))
    overhead = min(noop_lrn) - min(noop_raw)
    implied = min(raw_t) / (min(raw_t) + overhead)
    print(
        f'learner overhead: double DQN update (3-layer MLP, target net, Adam), batch {BATCH}, obs {OBS_DIM}, '
        f'actions {ACT_DIM}, 1 torch thread; {args.rounds} interleaved runs x {iters} iterations per variant; '
        f'{total:.0f} s in all'
    )
    print(f'learner hooks (default config): {hooks}')
    rows = [
        ('raw PyTorch loop', f'{1 / raw_med:,.0f}', f'{1 / min(raw_t):,.0f}', f'{raw_med * 1e6:,.1f}'),
        ('BaseLearner.train', f'{1 / lrn_med:,.0f}', f'{1 / min(lrn_t):,.0f}', f'{lrn_med * 1e6:,.1f}'),
    ]
    print(table(rows, ('variant', 'it/s (median)', 'it/s (best run)', 'us/it (median)')))
    ratio = raw_med / lrn_med
    print(
        f'ratio learner/raw: {ratio:.3f} (of medians), {paired:.3f} (median of per-run ratios); '
        f'target >= 0.97: {"OK" if ratio >= 0.97 else "BELOW TARGET"}'
    )
    print(
        f'learner cost per iteration, measured around a no-op update (best of 7 x 20000): {overhead * 1e6:.1f} us '
        f'-> implied ratio at the best raw DQN speed: {implied:.3f}'
    )
    if max(raw_t) > 1.3 * min(raw_t):
        print(
            f'note: raw runs varied {max(raw_t) / min(raw_t):.2f}x between runs (a busy machine?); '
            f'the medians are uncertain by about as much'
        )


# ---- second comparison: BaseLearner + the real DQN learn mode ----------------------------------------
DQN_TARGET = 0.85


def dqn_config() -> Any:
    """The CartPole DQN config compiled as the serial entry does (create_config policy type 'dqn'; nothing
    written to disk)."""
    from ding.config import compile_config
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

    create = copy.deepcopy(create_config)
    create.policy.type = 'dqn'
    return compile_config(main_config, create_cfg=create, auto=True, save_cfg=False)


def make_samples(cfg: Any) -> list[dict[str, Any]]:
    """One batch as the replay buffer returns it: DQN transitions (the fields and dtypes ``process_transition``
    and ``get_train_sample`` make) plus the collector's and the buffer's bookkeeping fields."""
    g = torch.Generator().manual_seed(1)
    obs_dim, act_dim = int(cfg.policy.model.obs_shape), int(cfg.policy.model.action_shape)
    nstep, gamma = int(cfg.policy.nstep), float(cfg.policy.discount_factor)
    samples = []
    for i in range(int(cfg.policy.learn.batch_size)):
        sample = {
            'obs': torch.randn(obs_dim, generator=g),
            'next_obs': torch.randn(obs_dim, generator=g),
            'action': torch.randint(0, act_dim, (), generator=g),
            'reward': torch.rand((nstep,) if nstep > 1 else (), generator=g),
            'done': bool(torch.rand((), generator=g).item() < 0.05),
            'collect_iter': i // 8,
            'env_id': i % 8,
            'replay_unique_id': f'buffer_{i}',
            'replay_buffer_idx': i,
        }
        if nstep > 1:
            sample['value_gamma'] = torch.tensor(gamma**nstep, dtype=torch.float32)
        samples.append(sample)
    return samples


def stack_samples(samples: list[dict[str, Any]], keys: list[str]) -> dict[str, torch.Tensor]:
    """What a plain PyTorch loop does with a list of samples: stack the fields it needs."""
    out = {}
    for k in keys:
        values = [s[k] for s in samples]
        out[k] = torch.stack(values) if isinstance(values[0], torch.Tensor) else torch.tensor(values)
    return out


class RawDQN:
    """The raw loop's state: ``ding.model.DQN`` from the config's model kwargs, a deep-copied target and fused
    ``ding.torch_utils.Adam``, as ``DQNPolicy`` builds them."""

    def __init__(self, cfg: Any, init_state: dict[str, torch.Tensor]) -> None:
        from ding.model import DQN
        from ding.torch_utils import Adam

        self.model = DQN(**cfg.policy.model)
        self.model.load_state_dict(init_state)
        self.target = copy.deepcopy(self.model)
        self.target.requires_grad_(False)
        self.optimizer = Adam(self.model.parameters(), lr=cfg.policy.learn.learning_rate, fused=True)
        self.gamma, self.nstep = float(cfg.policy.discount_factor), int(cfg.policy.nstep)
        self.discounts = self.gamma ** torch.arange(self.nstep, dtype=torch.float32)
        self.target_update_freq = int(cfg.policy.learn.target_update_freq)
        self.updates = 0


def raw_dqn_update(s: RawDQN, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    """One double-DQN step: the online net picks the next action, the target net scores it; n-step return;
    squared TD error; target weights assigned every ``target_update_freq`` updates. Returns the same log
    values as ``DQNPolicy``."""
    obs, next_obs, action, reward, done = (
        batch['obs'],
        batch['next_obs'],
        batch['action'],
        batch['reward'],
        batch['done'],
    )
    q = s.model(obs)['logit']
    with torch.no_grad():
        next_action = s.model(next_obs)['logit'].argmax(dim=-1)
        target_q = s.target(next_obs)['logit']
        next_q = target_q.gather(1, next_action.unsqueeze(1)).squeeze(1)
        if reward.dim() == 2:  # (B, nstep) n-step rewards
            ret, value_gamma = (reward * s.discounts).sum(1), batch['value_gamma']
        else:
            ret, value_gamma = reward, s.gamma
        target = ret + value_gamma * (1.0 - done.float()) * next_q
    q_taken = q.gather(1, action.unsqueeze(1)).squeeze(1)
    loss = (target - q_taken).pow(2).mean()
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    s.optimizer.step()
    s.updates += 1
    if s.updates % s.target_update_freq == 0:
        s.target.load_state_dict(s.model.state_dict())
    return {
        'cur_lr': s.optimizer.param_groups[0]['lr'],
        'total_loss': loss.item(),
        'q_value': q.detach().mean().item(),
        'target_q_value': target_q.mean().item(),
    }


def make_dqn_learner(cfg: Any, exp_name: str) -> Any:
    """``BaseLearner`` (the config's learner section: default hooks, NaN guard) around ``DQNPolicy``'s learn
    mode, after ``before_run`` as the serial pipeline calls it (that attaches the NaN guard)."""
    from ding.policy import DQNPolicy
    from ding.worker.learner import BaseLearner

    torch.manual_seed(0)
    policy = DQNPolicy(cfg.policy, enable_field=['learn'])
    learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode, exp_name=exp_name)
    learner.call_hook('before_run')
    return learner


def check_same_maths(cfg: Any, batch: dict[str, torch.Tensor], steps: int) -> float:
    """Max abs difference of the online weights after ``steps`` updates (past a target assignment) of the
    learner and of the raw loop from the same initial weights on the same batch."""
    learner = make_dqn_learner(cfg, 'learner_overhead_dqn_check')
    try:
        model = learner.policy.get_attribute('model')
        raw = RawDQN(cfg, model.state_dict())
        for i in range(steps):
            learner.train(batch, i)
            raw_dqn_update(raw, batch)
        return max(
            (a - b).abs().max().item() for a, b in zip(model.state_dict().values(), raw.model.state_dict().values())
        )
    finally:
        learner.close()


def measure(loop: Callable[[int], Any], iters: int) -> tuple[float, float]:
    """(wall-clock seconds, CPU seconds of this process) per iteration of ``loop(iters)``. On a shared machine
    the CPU time is much steadier: it leaves out the time other processes held the core."""
    wall, cpu = time.perf_counter(), time.process_time()
    loop(iters)
    return (time.perf_counter() - wall) / iters, (time.process_time() - cpu) / iters


def interleaved_many(fns: list[Callable[[], Any]], rounds: int) -> list[list[Any]]:
    """Results of ``rounds`` runs of each variant; the order rotates (and reverses) every round."""
    times: list[list[Any]] = [[] for _ in fns]
    n = len(fns)
    for r in range(rounds):
        order = list(range(n))
        order = order[r % n :] + order[: r % n]
        if (r // n) % 2:
            order.reverse()
        for i in order:
            times[i].append(fns[i]())
    return times


def profile_learner(learner: Any, data: Any, iters: int, top: int = 30) -> None:
    """Print the ``top`` functions by own time over ``iters`` calls of ``learner.train(data)``."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    run_learner(learner, data, iters)
    prof.disable()
    pstats.Stats(prof).sort_stats('tottime').print_stats(top)


def main_dqn(args: argparse.Namespace) -> None:
    from ding.utils.collate import default_collate

    load_before = os.getloadavg()
    started = time.perf_counter()
    cfg = dqn_config()
    samples = make_samples(cfg)
    keys = ['obs', 'next_obs', 'action', 'reward', 'done'] + (['value_gamma'] if cfg.policy.nstep > 1 else [])
    batch = default_collate(samples, keys)  # the pre-collated form: the tensors the raw loop gets
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the learners write ./{exp_name}/{log,ckpt}
        max_diff = check_same_maths(cfg, batch, 2 * int(cfg.policy.learn.target_update_freq) + 10)
        lrn_a = make_dqn_learner(cfg, 'learner_overhead_dqn_a')
        lrn_b = make_dqn_learner(cfg, 'learner_overhead_dqn_b')
        try:
            init = lrn_a.policy.get_attribute('model').state_dict()
            raw = RawDQN(cfg, init)
            raw_s = RawDQN(cfg, init)

            def raw_stacking(iters: int) -> None:
                for _ in range(iters):
                    raw_dqn_update(raw_s, stack_samples(samples, keys))

            loops = [
                lambda n: run_raw(raw_dqn_update, raw, batch, n),
                lambda n: run_learner(lrn_a, batch, n),
                raw_stacking,
                lambda n: run_learner(lrn_b, samples, n),
            ]
            # Warm-up (allocator, the first log show, which creates the tensorboard writer) and calibration.
            for loop in loops:
                loop(200)
            # Calibrated on CPU time: on a busy machine a wall-clock calibration gives runs too short to time.
            iters = max(50, int(args.seconds / measure(loops[0], 200)[1]))
            if args.profile:
                profile_learner(lrn_a, batch, iters)
            timed = interleaved_many([lambda loop=loop: measure(loop, iters) for loop in loops], args.rounds)
            (t_raw, t_a, t_stack, t_b), (c_raw, c_a, c_stack, c_b) = (
                [[t[k] for t in runs] for runs in timed] for k in (0, 1)
            )
            hooks = ', '.join(h.name for hs in lrn_a.hooks.values() for h in hs)
            guard_events = {**lrn_a.nan_guard_events, **{'b_' + k: v for k, v in lrn_b.nan_guard_events.items()}}
        finally:
            lrn_a.close()
            lrn_b.close()
            os.chdir(ROOT)
    total = time.perf_counter() - started
    load_after = os.getloadavg()

    m = cfg.policy.model
    print(
        f'learner overhead, real DQN learn mode: ding.policy.DQNPolicy from cartpole_dqn_config (model DQN '
        f'obs {m.obs_shape}, actions {m.action_shape}, encoder {list(m.encoder_hidden_size_list)}, '
        f'dueling={m.dueling}; nstep {cfg.policy.nstep}, batch {cfg.policy.learn.batch_size}, target assign every '
        f'{cfg.policy.learn.target_update_freq}, fused Adam), 1 torch thread; {args.rounds} interleaved runs x '
        f'{iters} iterations per variant; {total:.0f} s in all'
    )
    print(f'learner hooks (compiled config): {hooks}')
    print(
        f'same maths: max |weight difference| learner vs raw loop after '
        f'{2 * int(cfg.policy.learn.target_update_freq) + 10} updates = {max_diff:.2e}; '
        f'NaN guard events during the runs: {guard_events}'
    )
    print(
        f'load average (1, 5, 15 min): before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, '
        f'after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (2 cores)'
    )
    names = [
        'raw PyTorch loop, pre-collated batch',
        '(a) BaseLearner + DQNPolicy, pre-collated batch',
        'raw loop + torch.stack of the 64 samples',
        '(b) BaseLearner + DQNPolicy, 64 sample dicts (collate)',
    ]
    for clock, series in (('wall clock', (t_raw, t_a, t_stack, t_b)), ('CPU time', (c_raw, c_a, c_stack, c_b))):
        med = [statistics.median(t) for t in series]
        rows = []
        for i, (name, t) in enumerate(zip(names, series)):
            ratio = med[0] / med[i]
            per_run = statistics.median(r / x for r, x in zip(series[0], t))
            if i == 1:
                target = f'>= {DQN_TARGET}: {"OK" if ratio >= DQN_TARGET else "BELOW TARGET"}'
            elif i == 3:
                target = f'info; {med[2] / med[3]:.3f} vs raw+stack'
            else:
                target = '' if i == 0 else 'info'
            rows.append(
                (
                    name,
                    f'{1 / med[i]:,.0f}',
                    f'{1 / min(t):,.0f}',
                    f'{med[i] * 1e6:,.1f}',
                    f'{ratio:.3f}',
                    f'{per_run:.3f}',
                    target,
                )
            )
        print(f'{clock}:')
        print(
            table(
                rows,
                (
                    'variant',
                    'it/s (median)',
                    'it/s (best run)',
                    'us/it (median)',
                    'ratio vs raw (medians)',
                    'ratio (median per run)',
                    'target',
                ),
            )
        )
    if max(t_raw) > 1.3 * min(t_raw):
        print(
            f'note: raw wall-clock runs varied {max(t_raw) / min(t_raw):.2f}x between runs (a busy machine); '
            f'the wall-clock medians are uncertain by about as much, the CPU-time ones much less'
        )


if __name__ == '__main__':
    main()
