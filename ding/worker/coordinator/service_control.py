"""Run control of a parallel run: the coordinator side of the run service (tunables, pause / resume,
terminate) and the service fields every learner start task carries."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.rl_utils import get_epsilon_greedy_fn
from ding.worker.resume_choice import experiment_ckpt_dir, newest_valid_checkpoint

from .data_plane import DataPlane

# Learn settings a tune forwards to the learner with its next learn task, and their types. The learner's run
# control applies them between iterations (loss weights exist only where the policy config has them, e.g.
# PPO / A2C, not DQN).
FORWARDED_LEARN_TUNABLES = (
    ('learning_rate', float),
    ('entropy_weight', float),
    ('value_weight', float),
    ('batch_size', int),
)


class CoordinatorControl:
    """What a run service (``ding.service.start_service(..., instance='coordinator')``) may change in a run.

    ``main_cfg``: the compiled main config (tunes are written back into it, so learner tasks started later
    carry them); ``data``: the data plane (pausing stops its data flow; ``max_samples_per_iter`` is
    tunable); ``commander`` / ``commander_lock``: for the epsilon schedule; ``progress``: the learner
    iteration and env steps so far; ``on_pause_change`` is called when the run pauses or resumes;
    ``terminate`` ends the run and closes the tasks.
    """

    def __init__(
        self,
        main_cfg: EasyDict,
        system_cfg: EasyDict,
        data: DataPlane,
        commander: Any,
        commander_lock: threading.RLock,
        progress: Callable[[], tuple[int, int]],
        info: Callable[[str], None],
        on_pause_change: Callable[[], None],
        terminate: Callable[[str], None],
        resume: str | None,
        run_started: float,
    ) -> None:
        self._main_cfg = main_cfg
        self._system_cfg = system_cfg
        self._data = data
        self._commander = commander
        self._commander_lock = commander_lock
        self._progress = progress
        self._info = info
        self._on_pause_change = on_pause_change
        self._terminate = terminate
        self._resume = resume
        self.run_started = run_started
        self.runtime: Any = None
        self.paused = False
        self._learner_tune: dict[str, Any] = {}
        self._tuned_keys: set[str] = set()  # policy.learn keys changed by run control (copied into learner tasks)
        self._tune_lock = threading.Lock()

    def add_service_fields(self, task: dict) -> None:
        """What a learner start task carries for the run service and resume (see docs/operations.md)."""
        task.setdefault('service', copy.deepcopy(self._main_cfg.get('service')))
        task.setdefault('run_started', self.run_started)
        if self._tuned_keys and isinstance(task.get('policy'), dict):  # a restarted learner keeps the tunes
            learn = task['policy'].setdefault('learn', {})
            for key in list(self._tuned_keys):
                learn[key] = self._main_cfg.policy.learn[key]
        if self._resume and 'resume' not in task:
            task['resume'] = self._resume  # the first learner task of a resumed run

    def retry_resume(self, task: dict, last_iter: int) -> dict[str, Any]:
        """The ``resume`` field of a learner task moved to another learner: its newest checkpoint of this run
        (or of the resumed one), else the last published weights."""
        return {
            'policy_name': task.get('policy_name'),
            'last_iter': last_iter,
            'checkpoint': 'auto',
            'not_before': None if self._resume else self.run_started,
        }

    # ---- attaching a run service -----------------------------------------------------------------
    def attach(self, runtime: Any) -> None:
        """Register the tunables with ``runtime`` and take over its terminate."""
        self.runtime = runtime
        learn_cfg = self._main_cfg.policy.learn
        buffer_size = self._main_cfg.policy.get('other', {}).get('replay_buffer', {}).get('replay_buffer_size')

        def check_batch(value: int, pending: dict[str, Any]) -> str | None:
            if isinstance(buffer_size, int) and value > buffer_size:
                return (
                    f'batch_size = {value} must not exceed policy.other.replay_buffer.replay_buffer_size = '
                    f'{buffer_size}'
                )
            return None

        for key, kind in FORWARDED_LEARN_TUNABLES:
            value = learn_cfg.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                runtime.register_tunable(
                    key,
                    lambda k=key, t=kind: t(learn_cfg[k]),
                    self._forward_tune(key, kind),
                    check_batch if key == 'batch_size' else None,
                )
        if self._data.max_samples_per_iter is not None:
            runtime.register_tunable(
                'max_samples_per_iter', lambda: self._data.max_samples_per_iter, self._data.set_max_samples_per_iter
            )
        self._register_eps_tunables(runtime)
        runtime.control.on_terminate = self._terminate_by_control

    def _forward_tune(self, key: str, kind: Callable[[Any], Any]) -> Callable[[Any], None]:
        def set_(value: Any) -> None:
            # Kept in the config too: learner tasks started later (e.g. after a learner restart) get it.
            self._main_cfg.policy.learn[key] = kind(value)
            self._tuned_keys.add(key)
            with self._tune_lock:
                self._learner_tune[key] = kind(value)

        return set_

    def _register_eps_tunables(self, runtime: Any) -> None:
        eps_cfg = self._main_cfg.policy.get('other', {}).get('eps')
        # The object whose get_setting_collect runs: a built-in command mode itself, or the policy behind the
        # command-mode view of a policy built from import_names.
        collect_setting = getattr(getattr(self._commander, 'command_mode', None), 'get_setting_collect', None)
        mode = getattr(collect_setting, '__self__', None)
        if eps_cfg is None or mode is None or not hasattr(mode, 'epsilon_greedy'):
            return

        def check_eps(value: Any, pending: dict[str, Any]) -> str | None:
            start, end = pending.get('eps.start', eps_cfg.start), pending.get('eps.end', eps_cfg.end)
            return f'eps.end = {end} must not exceed eps.start = {start}' if end > start else None

        def setter(field: str) -> Callable[[Any], None]:
            def set_(value: Any) -> None:
                with self._commander_lock:  # the next collector task's epsilon comes from the new schedule
                    eps_cfg[field] = value
                    mode.epsilon_greedy = get_epsilon_greedy_fn(eps_cfg.start, eps_cfg.end, eps_cfg.decay, eps_cfg.type)

            return set_

        for field in ('start', 'end', 'decay'):
            runtime.register_tunable(
                f'eps.{field}',
                lambda f=field: eps_cfg[f],
                setter(field),
                check_eps if field in ('start', 'end') else None,
            )

    # ---- between rounds ----------------------------------------------------------------------------
    def poll(self) -> str:
        """Apply tunes, pause / resume the task flow, honour terminate. Returns the run control's state."""
        if self.runtime is None:
            return 'running'
        control, metrics = self.runtime.control, self.runtime.metrics
        done, env_step = self._progress()
        if done > control.iteration:  # the learner advanced: /healthz and the iteration metrics follow it
            if metrics is not None:
                metrics.sgd_steps.inc(done - control.iteration)
                metrics.iteration.set(done)
                metrics.last_step.set(time.time())
            control.note_progress(done)
        state = control.poll(done)
        paused = state in ('pausing', 'paused')
        if paused != self.paused:
            self.paused = self._data.paused = paused
            self._info(
                'paused by run control: no new tasks, no data to the learner' if paused else 'resumed by run control'
            )
            self._on_pause_change()
            self._data.notify()
        if metrics is not None:
            metrics.set_env_steps(env_step)
        return state

    def learner_task_extra(self) -> dict[str, Any] | None:
        """Fields for the next learn task's task_info: tunes for the learner (sent once)."""
        if not self._learner_tune:
            return None
        with self._tune_lock:
            tune, self._learner_tune = self._learner_tune, {}
        return {'tune': tune}

    def _terminate_by_control(self) -> dict[str, Any]:
        """``on_terminate``: end the run and close the tasks (the learner's close writes its final checkpoint)."""
        self._terminate('terminated by run control')
        out: dict[str, Any] = {'train_iter': self._progress()[0]}
        exp_name = self._main_cfg.exp_name
        for name in self._system_cfg.get('learner', {}):
            path = newest_valid_checkpoint(experiment_ckpt_dir(exp_name, name), not_before=self.run_started)
            if path:
                out[f'checkpoint_{name}'] = path
        return out
