"""``LearnerTraining``: a learner's hooks and one training iteration (``train``: ``before_iter`` hooks, the
policy's learn-mode update, log routing, ``after_iter`` hooks). ``BaseLearner`` builds on it (its policy,
construction, the parallel-mode loop and teardown); serial pipelines call ``train`` once per update."""

from __future__ import annotations

from time import perf_counter
from typing import Any

from .hook_base import LearnerHook, add_learner_hook
from .learner_state import LearnerState
from .log_routing import priority_info_of, route_log_vars


class LearnerTraining(LearnerState):
    """Runs the hooks and ``policy.forward(data)`` of one iteration; the policy is set by ``BaseLearner``."""

    _policy: Any = None

    # ---- hooks ---------------------------------------------------------------------------------------
    def register_hook(self, hook: LearnerHook) -> None:
        """Add ``hook`` after the hooks of its position with priority <= its own."""
        add_learner_hook(self._hooks, hook)

    def call_hook(self, name: str) -> None:
        """Run the hooks of position ``name`` in order, timing each one."""
        hooks = self._hooks.get(name)
        if hooks is None:
            raise ValueError(f'call_hook: unknown position {name!r}; valid positions are {list(self._hooks)}')
        times = self._hook_time
        for hook in hooks:
            t0 = perf_counter()
            hook(self)
            dt = perf_counter() - t0
            rec = times.get(hook.name)
            if rec is None:
                times[hook.name] = [dt, 1, name]
            else:
                rec[0] += dt
                rec[1] += 1

    # ---- training ------------------------------------------------------------------------------------
    def train(self, data: Any, envstep: int = -1, policy_kwargs: dict[str, Any] | None = None) -> Any:
        """One iteration: ``before_iter`` hooks, ``policy.forward(data)``, log routing, ``after_iter`` hooks.

        ``data`` is a list of sample dicts or a collated batch dict. ``envstep`` >= 0 updates
        ``collector_envstep``. Returns the policy's log vars (without ``priority`` and the
        ``[histogram]`` / ``[scalars]`` keys). A policy may return a list of log dicts (several
        updates in one forward); each then counts as one iteration.
        """
        policy = self._policy
        if policy is None:
            raise RuntimeError('BaseLearner.train: no policy; set learner.policy = policy.learn_mode first')
        if envstep >= 0:
            self._collector_envstep = envstep
        if self.track_replay_cursor:
            self._note_replay_cursor(data)
        hooks = self._hooks
        if hooks['before_iter']:
            self.call_hook('before_iter')
        if policy_kwargs:
            log_vars = policy.forward(data, **policy_kwargs)
        else:
            log_vars = policy.forward(data)
        if isinstance(log_vars, dict):
            priority = log_vars.pop('priority', None)
            if priority is not None:
                self._priority_info = priority_info_of(priority, data)
            route_log_vars(self._log_buffer, log_vars)
            self._end_iter(hooks['after_iter'])
        elif isinstance(log_vars, list) and all(isinstance(e, dict) for e in log_vars):
            priority = log_vars[-1].pop('priority', None) if log_vars else None
            if priority is not None:
                self._priority_info = priority_info_of(priority, data)
            for elem in log_vars:
                route_log_vars(self._log_buffer, elem)
                self._end_iter(hooks['after_iter'])
        else:
            raise TypeError(
                f'BaseLearner.train: policy forward must return a dict (or a list of dicts) '
                f'of log values, got {type(log_vars).__name__}'
            )
        return log_vars

    def _note_replay_cursor(self, data: Any) -> None:
        # The ids of the batch about to be trained on: a checkpoint records them, so a run restarted from it
        # can tell which transitions were sampled last (the gap to the replay service's newest ones).
        if isinstance(data, list) and data and isinstance(data[0], dict) and 'replay_unique_id' in data[0]:
            self.replay_cursor = {
                'train_iter': self._last_iter.val,
                'envstep': self._collector_envstep,
                'last_sampled_ids': [d.get('replay_unique_id') for d in data],
            }

    def _end_iter(self, after_iter: list[LearnerHook]) -> None:
        if after_iter:
            self._in_after_iter = True
            times = self._hook_time
            try:
                # call_hook('after_iter'), inlined: this runs every iteration.
                for hook in after_iter:
                    t0 = perf_counter()
                    hook(self)
                    dt = perf_counter() - t0
                    rec = times.get(hook.name)
                    if rec is None:
                        times[hook.name] = [dt, 1, 'after_iter']
                    else:
                        rec[0] += dt
                        rec[1] += 1
            finally:
                self._in_after_iter = False
        self._last_iter.add(1)


__all__ = ['LearnerTraining']
