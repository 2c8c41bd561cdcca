"""A small, real policy for the learner tests: an MLP regressor trained with Adam on an MSE loss.

The model has dropout, so training draws from torch's global RNG: a resumed run matches a straight
run only when the learner restores the RNG state as well as parameters and optimizer state.
"""

import os
from typing import Any

import torch
import torch.nn as nn

from ding.policy.base_policy import Policy
from ding.utils.collate import default_collate

OBS_DIM = 4


class RegressionPolicy(Policy):
    config = dict(
        type='test_regression',
        cuda=False,
        priority=False,
        learn=dict(batch_size=8, learning_rate=0.01, extra_logs=False, fail_at_call=-1),
    )

    def default_model(self):
        raise NotImplementedError  # the tests always pass a model

    def _init_learn(self) -> None:
        learn = self._cfg.learn
        self._batch_size = learn.batch_size
        self._lr = learn.learning_rate
        self._optimizer = torch.optim.Adam(self._model.parameters(), lr=self._lr)
        self._forward_calls = 0

    def _forward_learn(self, data: Any, epochs: int = 0) -> Any:
        """One Adam step; with ``epochs`` > 0, that many steps on the same batch and a list of log dicts."""
        if epochs:
            return [self._forward_learn(data) for _ in range(epochs)]
        self._forward_calls += 1
        if self._forward_calls == self._cfg.learn.fail_at_call:
            raise RuntimeError(f'policy failure at forward call {self._forward_calls}')
        if isinstance(data, list):
            data = default_collate(data, keys=('obs', 'target'))
        self._model.train()
        pred = self._model(data['obs'])
        err = pred - data['target']
        loss = (err**2).mean()
        self._optimizer.zero_grad()
        loss.backward()
        self._optimizer.step()
        out = {'cur_lr': self._lr, 'total_loss': loss.item()}
        if self._cfg.priority:
            out['priority'] = err.detach().abs().squeeze(-1).tolist()
        if self._cfg.learn.extra_logs:
            out['[histogram]abs_error'] = err.detach().abs().squeeze(-1).tolist()
            out['[scalars]loss_parts'] = {'mse': loss.item(), 'mae': err.detach().abs().mean().item()}
        return out

    def _monitor_vars_learn(self) -> list[str]:
        return ['cur_lr', 'total_loss']

    # The learner only uses learn mode; the other modes are minimal but real.
    def _init_collect(self) -> None:
        pass

    def _init_eval(self) -> None:
        pass

    def _forward_collect(self, data, **kwargs):
        with torch.no_grad():
            return {i: {'action': self._model(torch.as_tensor(o).unsqueeze(0))[0]} for i, o in data.items()}

    def _forward_eval(self, data):
        return self._forward_collect(data)

    def _process_transition(self, obs, policy_output, timestep):
        return {'obs': obs, 'target': timestep.reward}

    def _get_train_sample(self, transitions):
        return transitions


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(OBS_DIM, 16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 1))


def make_policy(seed: int = 0, **learn: Any) -> RegressionPolicy:
    """A fresh policy whose initial weights depend only on ``seed``."""
    cfg = RegressionPolicy.default_config()
    priority = learn.pop('priority', False)
    cfg.priority = priority
    cfg.learn.update(learn)
    torch.manual_seed(seed)
    return RegressionPolicy(cfg, model=make_model(), enable_field=['learn'])


def make_sample(i: int) -> dict[str, Any]:
    """Sample number ``i``: a deterministic function of ``i`` only (no global RNG)."""
    g = torch.Generator().manual_seed(1000 + i)
    obs = torch.randn(OBS_DIM, generator=g)
    return {
        'obs': obs,
        'target': obs.sum(0, keepdim=True) * 0.5,
        'replay_buffer_idx': i % 97,
        'replay_unique_id': f'uid-{i}',
    }


def make_batch(it: int, batch_size: int = 8) -> list[dict[str, Any]]:
    """The list of samples for iteration ``it``."""
    return [make_sample(it * batch_size + j) for j in range(batch_size)]


def learner_cfg(**hook: Any) -> dict[str, Any]:
    """A learner config whose hooks are all off except those given."""
    base = dict(load_ckpt_before_run='', log_show_after_iter=0, save_ckpt_after_iter=0, save_ckpt_after_run=False)
    base.update(hook)
    return dict(hook=base)


def read_tb_events(logdir: str) -> dict[str, list[tuple]]:
    """Parse the tensorboard event files under ``logdir``: ``{tag: [(step, value or 'histogram'), ...]}``."""
    import glob
    import struct

    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple]] = {}
    for path in sorted(glob.glob(os.path.join(logdir, '**', 'events.out.tfevents.*'), recursive=True)):
        with open(path, 'rb') as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):  # TFRecord: u64 length, u32 crc, payload, u32 crc
            (n,) = struct.unpack('<Q', data[pos : pos + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[pos + 12 : pos + 12 + n])
            pos += 12 + n + 4
            for v in event.summary.value:
                kind = v.WhichOneof('value')
                value = v.simple_value if kind == 'simple_value' else kind
                out.setdefault(v.tag, []).append((event.step, value))
    return out
