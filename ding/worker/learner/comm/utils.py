"""Learner hooks a comm learner registers on its ``BaseLearner`` (parallel mode).

The comm learner gives the learner two callbacks, ``send_policy`` and ``send_learn_info``; these hooks
call them at the right points of the learner's life:

* ``SendPolicyHook``: publishes the weights at ``before_run`` and every ``ext_args.freq`` iterations
  (``after_iter``), as ``engine.send_policy({'model': model_state_dict, 'iter': policy_iter})``.
* ``SendLearnInfoHook``: hands ``engine.learn_info`` to ``engine.send_learn_info(info)`` after an iteration.
  With a :class:`LearnInfoGate` (shared with a ``before_iter`` instance of the same hook) exactly one learn
  info leaves per ``train()`` call, even for a policy that reports several updates per call, and
  ``learner_done`` is set on the last call of the run.
"""

from __future__ import annotations

from typing import Any

from ding.worker.learner.learner_hook import LearnerHook, iterations_done, register_learner_hook


def _freq(ext_args: dict[str, Any], name: str) -> int:
    freq = ext_args.get('freq', 1)
    if isinstance(freq, bool) or not isinstance(freq, int) or freq < 1:
        raise ValueError(f"learner hook '{name}': ext_args.freq must be a positive integer, got {freq!r}")
    return freq


class SendPolicyHook(LearnerHook):
    """Publish the policy's model weights for the collectors.

    ``before_run``: always (so collectors start from the learner's weights, loaded checkpoint included).
    ``after_iter``: every ``ext_args.freq`` completed iterations, when the comm learner's
    ``policy_publish_due()`` says a write would happen now (a throttled publisher would only replace the
    weights). The version sent as ``'iter'`` is the
    number of updates the weights have seen (``iterations_done``), which collectors stamp on their samples
    as ``policy_iter``.
    """

    def __init__(
        self,
        name: str,
        priority: float,
        position: str | None = None,
        ext_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, position=position, ext_args=ext_args, **kwargs)
        if self.position not in ('before_run', 'after_iter'):
            raise ValueError(
                f"learner hook '{self.name}': SendPolicyHook runs at before_run or after_iter, not {self.position!r}"
            )
        self._freq = _freq(self._ext_args, self.name)

    @property
    def freq(self) -> int:
        return self._freq

    def __call__(self, engine: Any) -> None:
        done = iterations_done(engine)
        if self.position == 'after_iter':
            if done % self._freq:
                return
            due = getattr(engine, 'policy_publish_due', None)
            if due is not None and not due():  # would be replaced before it is written
                return
        engine.send_policy({'model': engine.policy.state_dict()['model'], 'iter': done})


class LearnInfoGate:
    """State shared by the ``before_iter`` and ``after_iter`` ``SendLearnInfoHook`` of one learner run.

    ``calls``: ``train()`` calls so far in this run; ``armed``: this call's learn info is not sent yet.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.armed = False


class SendLearnInfoHook(LearnerHook):
    """Send the learner's learn info to the comm learner (``engine.send_learn_info(info)``).

    Without ``ext_args.gate``: every ``ext_args.freq``-th ``after_iter`` sends ``engine.learn_info`` as is.
    With ``ext_args.gate`` (a :class:`LearnInfoGate`): register one instance at ``before_iter`` and one at
    ``after_iter`` sharing the gate. The first ``after_iter`` of each ``train()`` call sends, later ones of
    the same call do not, and ``learner_done`` is True when this call is the run's
    ``engine.cfg.train_iterations``-th.
    """

    def __init__(
        self,
        name: str,
        priority: float,
        position: str | None = None,
        ext_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, position=position, ext_args=ext_args, **kwargs)
        self._gate: LearnInfoGate | None = self._ext_args.get('gate')
        if self._gate is not None and not isinstance(self._gate, LearnInfoGate):
            raise TypeError(f"learner hook '{self.name}': ext_args.gate must be a LearnInfoGate, got {self._gate!r}")
        allowed = ('before_iter', 'after_iter') if self._gate is not None else ('after_iter',)
        if self.position not in allowed:
            raise ValueError(f"learner hook '{self.name}': SendLearnInfoHook runs at {allowed}, not {self.position!r}")
        self._freq = _freq(self._ext_args, self.name)

    def __call__(self, engine: Any) -> None:
        gate = self._gate
        if gate is None:
            if iterations_done(engine) % self._freq == 0:
                engine.send_learn_info(engine.learn_info)
            return
        if self.position == 'before_iter':
            gate.calls += 1
            gate.armed = True
            return
        if not gate.armed:
            return
        gate.armed = False
        info = engine.learn_info
        info['learner_done'] = gate.calls >= engine.cfg.train_iterations
        engine.send_learn_info(info)


# Buildable from a learner's hook config too (full form: type='send_policy' / 'send_learn_info').
register_learner_hook('send_policy', SendPolicyHook)
register_learner_hook('send_learn_info', SendLearnInfoHook)

__all__ = ['SendPolicyHook', 'SendLearnInfoHook', 'LearnInfoGate']
