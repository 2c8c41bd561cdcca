"""Setting up a learner task of the flask_fs comm learner from its start task: the settings its configs give
(``TaskSettings``) and, for a task moved here from a dead learner, where it resumes (``apply_resume``)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from ding.config.errors import ConfigError
from ding.utils.file_transport import CheckpointError, load_policy
from ding.utils.pytorch_ddp_dist_helper import broadcast_state
from ding.utils.safe_paths import resolved
from ding.worker.resume_choice import RESUME_AUTO, RESUME_NEVER, experiment_ckpt_dir
from ding.worker.task_fields import (
    TaskFieldError,
    allowed_imports,
    check_task_imports,
    check_task_names,
    checked_path,
    path_inside,
)

from .learner_run import LearnerRun

# The name of a run's checkpoint directories (``ding.worker.resume.experiment_ckpt_dir``): 'ckpt', 'ckpt_<learner>'.
CKPT_DIR = os.path.basename(experiment_ckpt_dir('run'))


def check_positive_int(value: Any, what: str) -> int:
    """``value`` if it is an int >= 1, else ``ConfigError`` (a ``ValueError``) naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f'{what} must be a positive integer, got {value!r}')
    return value


def check_comm_config(cfg: Any) -> None:
    """Refuse a comm learner config the flask_fs learner cannot run with (``ValueError`` naming the key)."""
    if cfg.use_distributed:
        raise ValueError(f"comm learner {cfg.name}: use_distributed=True is not supported by 'flask_fs'")
    check_positive_int(cfg.send_policy_freq, f'comm learner {cfg.name}: send_policy_freq')
    interval = cfg.send_policy_min_interval
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 <= interval < math.inf:
        raise ValueError(
            f'comm learner {cfg.name}: send_policy_min_interval must be a number of seconds >= 0, got {interval!r}'
        )
    check_positive_int(cfg.load_workers, f'comm learner {cfg.name}: load_workers')


def check_learner_task(cfg: Any, task_info: dict[str, Any]) -> tuple[str, str]:
    """Refuse a start task that names anything outside what the comm learner was started with
    (``TaskFieldError`` naming the field): its names must be plain names, its ``import_names`` allowed by
    ``cfg`` (see ``ding.worker.task_fields``), its directories inside ``cfg.path_policy`` / ``cfg.path_data``
    and the checkpoints it resumes from inside the run's checkpoint directories. Returns the task's
    ``(path_policy, path_data)``, resolved (the config's where the task names none)."""
    check_task_names(task_info)
    check_task_imports(task_info, allowed_imports(cfg))
    path_policy = checked_path(task_info, 'path_policy', [cfg.path_policy]) or cfg.path_policy
    path_data = checked_path(task_info, 'path_data', [cfg.path_data]) or cfg.path_data
    run_dir = os.path.join('.', task_info.get('exp_name') or cfg.exp_name)
    resume = task_info.get('resume')
    if isinstance(resume, dict):
        check_task_names(resume, ['policy_name'], prefix='resume.')
        _check_checkpoint_path(resume.get('checkpoint'), run_dir, 'resume.checkpoint')
    else:
        _check_checkpoint_path(resume, run_dir, 'resume')
    learner_cfg = task_info.get('learner_cfg')
    hooks = learner_cfg.get('hook') if isinstance(learner_cfg, dict) else None
    if isinstance(hooks, dict):
        for key, hook in hooks.items():
            if key == 'load_ckpt_before_run':
                _check_checkpoint_path(hook, run_dir, f'learner_cfg.hook.{key}')
            elif isinstance(hook, dict) and isinstance(hook.get('ext_args'), dict):
                load_path = hook['ext_args'].get('load_path')
                _check_checkpoint_path(load_path, run_dir, f'learner_cfg.hook.{key}.ext_args.load_path')
    return path_policy, path_data


def _check_checkpoint_path(value: Any, run_dir: str, field: str) -> None:
    """A checkpoint path of the task (not a setting such as 'auto') must lie inside one of the run's checkpoint
    directories: ``{run_dir}/ckpt`` or ``{run_dir}/ckpt_{learner}`` (``experiment_ckpt_dir``; a task moved from
    another learner resumes from that learner's)."""
    if value is None or value is False or value in ('', RESUME_AUTO, RESUME_NEVER):
        return
    if not isinstance(value, str):
        raise TaskFieldError(field, f'must be a checkpoint path string, got {value!r}')
    real = path_inside(value, [run_dir], field)
    first = os.path.relpath(real, resolved(run_dir)).split(os.sep)[0]
    if first != CKPT_DIR and not first.startswith(CKPT_DIR + '_'):
        raise TaskFieldError(
            field, f'{value!r} is not inside a checkpoint directory of the run ({run_dir}/{CKPT_DIR}[_<learner>])'
        )


@dataclass(frozen=True)
class TaskSettings:
    """What a start task sets for its run (from its learner config, falling back to the comm learner's)."""

    policy_name: str
    path_policy: str
    path_data: str
    max_staleness: float
    send_policy_freq: int
    comm_batches: int

    @classmethod
    def of(cls, cfg: Any, task_info: dict[str, Any]) -> TaskSettings:
        """``cfg``: the comm learner's config; ``task_info``: the start task's. A task naming anything outside
        the comm learner's directories or allowed imports raises ``TaskFieldError`` (``check_learner_task``)."""
        path_policy, path_data = check_learner_task(cfg, task_info)
        learner_cfg = task_info.get('learner_cfg') or {}
        if not isinstance(learner_cfg, dict):
            learner_cfg = {}
        max_staleness = learner_cfg.get('max_staleness', math.inf)
        if max_staleness is None:
            max_staleness = math.inf
        if isinstance(max_staleness, bool) or not isinstance(max_staleness, (int, float)) or max_staleness < 0:
            raise ConfigError(f"learner config 'max_staleness' must be a number >= 0, got {max_staleness!r}")
        # DI-engine keeps send_policy_freq in policy.learn.learner; the comm learner config's is the default.
        freq = learner_cfg.get('send_policy_freq', cfg.send_policy_freq)
        comm_batches = learner_cfg.get('comm_batches', cfg.comm_batches)
        instance_name = task_info.get('instance_name') or cfg.name
        return cls(
            policy_name=task_info.get('policy_name') or f'policy_{instance_name}',
            path_policy=path_policy,
            path_data=path_data,
            max_staleness=float(max_staleness),
            send_policy_freq=check_positive_int(freq, "learner config 'send_policy_freq'"),
            comm_batches=check_positive_int(comm_batches, "learner config 'comm_batches'"),
        )

    def new_run(self, task_info: dict[str, Any], learner: Any, logger: Any) -> LearnerRun:
        """The run of the start task ``task_info`` with its ``learner`` (resumed: see ``apply_resume``)."""
        run = LearnerRun(
            task_info['task_id'],
            learner,
            self.policy_name,
            self.path_policy,
            self.path_data,
            self.max_staleness,
            self.comm_batches,
            task_info['policy'],
        )
        apply_resume(run, task_info, logger)
        if task_info.get('dist') is not None:
            take_rank0_state(run, task_info, logger)
        return run


def take_rank0_state(run: LearnerRun, task_info: dict[str, Any], logger: Any) -> None:
    """Every rank of a data-parallel group continues from rank 0's learner state: weights, optimizer moments,
    target network and iteration. Rank 0 may have resumed from a checkpoint with its optimizer state while a
    rank that rejoined found only the published weights: with different optimizer states the ranks' weights
    would drift apart from the first step, even with the same averaged gradients."""
    learner = run.learner
    state = {'policy': learner.policy.state_dict(), 'last_iter': learner.train_iter}
    shared = broadcast_state(state if learner.rank == 0 else None)
    if learner.rank == 0:
        return
    before = learner.train_iter
    learner.policy.load_state_dict(shared['policy'])
    learner.last_iter.update(int(shared['last_iter']))
    run.start_iter = learner.train_iter
    max_iterations = task_info.get('max_iterations')
    if max_iterations is not None:
        learner.cfg.train_iterations = max(0, int(max_iterations) - learner.train_iter)
    logger.info(f"learner task {run.task_id}: took rank 0's state at iteration {learner.train_iter} (had {before})")


def apply_resume(run: LearnerRun, task_info: dict[str, Any], logger: Any) -> None:
    """A resumed task (``task_info['resume']``): the learner has loaded the newest valid checkpoint of its own
    when there is one (``resumed_from``); otherwise it continues from the weights the dead learner last
    published (``resume['weights_from']`` or ``resume['policy_name']``: a policy file verifies alone). Whatever
    the dead learner had done beyond the resumed iteration (``resume['last_iter']``) is logged at WARNING with
    the iterations lost. The iterations left are counted from where it resumed."""
    resume = task_info.get('resume')
    if not resume:
        return
    learner = run.learner
    if isinstance(resume, dict):
        if resume.get('policy_name'):  # the same task moved here: publish under the name collectors read
            run.policy_name = str(resume['policy_name'])
        source = getattr(learner, 'resumed_from', None)
        if source is None:
            source = _resume_published_weights(run, resume, logger)
        _report_lost_iterations(run, resume, source, logger)
    run.start_iter = learner.train_iter
    max_iterations = task_info.get('max_iterations')
    if max_iterations is not None:
        learner.cfg.train_iterations = max(0, int(max_iterations) - learner.train_iter)


def _resume_published_weights(run: LearnerRun, resume: dict[str, Any], logger: Any) -> str | None:
    """Load the dead learner's policy file into ``run.learner``; returns its path, or None (fresh weights)."""
    name = resume.get('weights_from') or resume.get('policy_name') or run.policy_name
    path = os.path.join(run.path_policy, str(name) + '.safetensors')
    try:
        state, policy_iter = load_policy(path)
        run.learner.policy.load_state_dict({'model': state})
    except (CheckpointError, KeyError, RuntimeError) as exc:
        logger.warning(
            f'learner task {run.task_id}: no valid checkpoint of this run and cannot resume from {path} ({exc}); '
            'training starts from fresh weights'
        )
        return None
    run.learner.last_iter.update(policy_iter)
    logger.info(
        f'learner task {run.task_id}: no valid checkpoint of this run; resumed from {path} at iteration {policy_iter}'
    )
    return path


def _published_iter(run: LearnerRun, resume: dict[str, Any]) -> int | None:
    """The iteration of the dead learner's last published weights (a policy file verifies alone), or None."""
    name = resume.get('weights_from') or resume.get('policy_name')
    if not name:
        return None
    try:
        return load_policy(os.path.join(run.path_policy, str(name) + '.safetensors'))[1]
    except CheckpointError:
        return None


def _report_lost_iterations(run: LearnerRun, resume: dict[str, Any], source: str | None, logger: Any) -> None:
    # The coordinator's count lags the learner by the learn infos in flight; the last published weights say
    # how far the dead learner really got, give or take one publishing interval.
    reached = [v for v in (resume.get('last_iter'), _published_iter(run, resume)) if type(v) is int]
    if not reached:
        return
    resumed = int(run.learner.train_iter)
    lost = max(reached) - resumed
    where = source if source is not None else 'fresh weights'
    if lost > 0:
        logger.warning(
            f'learner task {run.task_id}: resumed at iteration {resumed} from {where}; {lost} iterations of '
            f'training lost (the previous learner had reached iteration {max(reached)})'
        )
    else:  # it died before reporting past the resumed iteration: how far it got is unknown, not zero
        logger.warning(
            f'learner task {run.task_id}: resumed at iteration {resumed} from {where}; the previous learner last '
            f'reported iteration {max(reached)}, and any training it did after that report is lost'
        )


__all__ = ['TaskSettings', 'apply_resume', 'check_comm_config', 'check_learner_task', 'check_positive_int']
