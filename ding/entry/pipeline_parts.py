"""Building and tearing down what every serial pipeline uses: config, envs, policy, workers."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from easydict import EasyDict

from ding.config import ConfigError, compile_config, read_config
from ding.envs import create_env_manager, get_vec_env_setting
from ding.policy import create_policy
from ding.torch_utils import configure_torch_threads
from ding.utils import config_hash, set_pkg_seed
from ding.utils.atomic_file import StorageError
from ding.utils.console import FILE_ONLY, console_level_problem, say, set_console_level
from ding.utils.log_helper import build_summary_writer
from ding.worker import (
    BaseLearner,
    InteractionSerialEvaluator,
    create_buffer,
    create_serial_collector,
    create_serial_commander,
)
from ding.worker.replay_service import check_replay_client_config
from ding.worker.resume import (
    register_checkpoint_extras,
    resolve_resume,
    restore_serial_state,
    save_buffer_with_checkpoint,
)

from .progress import RunProgress
from .rank_group import RankGroup, parameter_digest, stop_reason
from .rank_launcher import RankProgressFile


def load_input_config(input_cfg: str | tuple[dict, dict]) -> tuple[EasyDict, EasyDict]:
    """Accept a config file path or a ``(main_config, create_config)`` pair; return deep copies. The config's
    ``console`` key sets this process's console level (``ding.utils.console``)."""
    if isinstance(input_cfg, (str, os.PathLike)):
        cfg, create_cfg, _ = read_config(str(input_cfg))
    else:
        cfg, create_cfg = input_cfg[0], input_cfg[1]
    level = cfg.get('console')
    problem = None if level is None else console_level_problem(level, "top-level key 'console'")
    if problem:
        raise ConfigError(problem)
    set_console_level(level)  # this run's console level (DING_CONSOLE, set by `ding -q/-v`, wins)
    return EasyDict(copy.deepcopy(dict(cfg))), EasyDict(copy.deepcopy(dict(create_cfg)))


class FinishableRun(Protocol):
    """What ``finish_run`` reads of a pipeline's parts (serial, async and SEED parts all provide it)."""

    cfg: EasyDict
    policy: Any
    learner: BaseLearner
    evaluator: Any
    progress: RunProgress
    service: Any
    ranks: RankGroup
    closables: list[Callable[[], None]]

    @property
    def envstep(self) -> int: ...

    @property
    def collector(self) -> Any: ...


@dataclass
class SerialParts:
    cfg: EasyDict
    policy: Any
    learner: Any
    collector: Any
    evaluator: Any
    buffer: Any
    commander: Any
    tb_logger: Any
    progress: RunProgress
    closables: list[Callable[[], None]] = field(default_factory=list)
    resume_path: str | None = None  # the checkpoint this run resumed from (see ding.worker.resume)
    service: Any = None  # the run service (ding.service.hooks.ServiceRuntime) when cfg.service asks for one
    ranks: RankGroup = field(default_factory=RankGroup)  # this process's rank (rank 0 of 1 without a group)
    envstep: int = 0  # env steps of the run: the collectors' of every rank summed
    rank_progress: RankProgressFile | None = None  # where rank 0 tells `ding --nproc` its iteration


def build_serial_parts(
    cfg: EasyDict,
    create_cfg: EasyDict,
    seed: int,
    env_setting: list | None,
    model: Any,
    dynamic_seed: bool | None,
    max_env_step: int | None,
    with_buffer: bool,
    resume: Any = None,
) -> SerialParts:
    """Compile the config (validating it before any work starts), then build envs, policy and workers.

    ``resume`` ('auto', 'never', a checkpoint path; None: the config's ``resume`` key) picks a
    checkpoint to continue from: the run keeps its directory and the workers get the saved state.
    """
    # Before any work: a bad resume path fails here, and a resumed run keeps (does not renew) its directory.
    resume_path = resolve_resume(cfg, resume)
    ranks = RankGroup.current()
    if ranks.several:
        cfg.world_size = ranks.world_size

    create_cfg.policy.type = create_cfg.policy.type + '_command'
    env_fn = None if env_setting is None else env_setting[0]
    cfg = compile_config(
        cfg,
        seed=seed + ranks.rank,  # each rank's envs get their own seeds
        env=env_fn,
        auto=True,
        create_cfg=create_cfg,
        save_cfg=ranks.is_main,
        renew_dir=resume_path is None,
    )
    cfg.exp_name, resume_path = agree_run_dir(ranks, cfg.exp_name, resume_path)
    log_exp = ranks.log_exp_name(cfg.exp_name)
    save_buffer = save_buffer_with_checkpoint(cfg)
    if cfg.get('service') is not None:  # a bad service section fails here, before any env is built
        from ding.service import check_service_config  # deferred: the run service loads only when asked for

        check_service_config(cfg.service)
    replay_client = check_replay_client_config(cfg.policy.other.replay_buffer) if with_buffer else None
    secret = None
    if replay_client is not None:  # a replay server holds the data (docs/replay.md)
        from ding.worker.replay_service.remote_buffer import RemoteReplayBuffer, replay_secret  # deferred: the extra

        secret = replay_secret()  # the run secret is there before any env is built
    if resume_path is not None and cfg.policy.learn.learner.hook.get('load_ckpt_before_run'):
        cfg.policy.learn.learner.hook.load_ckpt_before_run = ''  # the resumed state must not be overwritten
    if env_setting is None:
        env_fn, collector_env_cfg, evaluator_env_cfg = get_vec_env_setting(cfg.env)
    else:
        env_fn, collector_env_cfg, evaluator_env_cfg = env_setting
    closables: list[Callable[[], None]] = []
    collector_env = create_env_manager(cfg.env.manager, [partial(env_fn, cfg=c) for c in collector_env_cfg])
    closables.append(collector_env.close)
    evaluator_env = create_env_manager(cfg.env.manager, [partial(env_fn, cfg=c) for c in evaluator_env_cfg])
    closables.append(evaluator_env.close)
    collector_env.seed(cfg.seed, dynamic_seed=bool(dynamic_seed))
    evaluator_env.seed(cfg.seed, dynamic_seed=False)
    set_pkg_seed(cfg.seed, use_cuda=cfg.policy.cuda)
    configure_torch_threads()

    policy = create_policy(cfg.policy, model=model, enable_field=['learn', 'collect', 'eval', 'command'])
    tb_logger = build_summary_writer(os.path.join(f'./{log_exp}/log/', 'serial'))
    closables.append(tb_logger.close)
    learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode, tb_logger, exp_name=log_exp)
    learner.config_hash = config_hash(cfg)
    learner.run_config = cfg  # the config snapshot of a remote checkpoint's MANIFEST.json
    closables.insert(0, learner.close)
    collector = create_serial_collector(
        cfg.policy.collect.collector,
        env=collector_env,
        policy=policy.collect_mode,
        tb_logger=tb_logger,
        exp_name=log_exp,
    )
    closables.insert(0, collector.close)
    evaluator = InteractionSerialEvaluator(
        cfg.policy.eval.evaluator, evaluator_env, policy.eval_mode, tb_logger, exp_name=log_exp
    )
    closables.insert(0, evaluator.close)
    buffer = None
    if with_buffer and replay_client is not None and secret is not None:
        buffer = RemoteReplayBuffer(
            replay_client,
            cfg.policy.learn.batch_size,
            secret,
            on_state=partial(log_replay_state, learner),
            on_insert_retry=partial(log_insert_retry, learner),
        )
        closables.insert(0, buffer.close)
    elif with_buffer:
        buffer = create_buffer(cfg.policy.other.replay_buffer, tb_logger=tb_logger, exp_name=log_exp)
        closables.insert(0, buffer.close)
    commander = create_serial_commander(
        cfg.policy.other.commander, learner, collector, evaluator, buffer, policy.command_mode
    )
    register_checkpoint_extras(learner, collector, evaluator, buffer, save_buffer)
    if resume_path is not None:
        try:
            # Rank 0's RNG streams are in the checkpoint: the other ranks keep their own (they sample other data).
            restore_serial_state(learner, collector, evaluator, buffer, resume_path, restore_rng=ranks.is_main)
        except BaseException:
            for close in closables:
                try:
                    close()
                except Exception:
                    pass
            raise
    progress = RunProgress(cfg.exp_name, max_env_step, enabled=ranks.is_main)
    parts = SerialParts(
        cfg, policy, learner, collector, evaluator, buffer, commander, tb_logger, progress, closables, resume_path
    )
    parts.ranks, parts.envstep = ranks, ranks.total(collector.envstep)
    start_rank_run(parts)
    if cfg.get('service') and ranks.is_main:  # run control / metrics / weights server, JSON event log (ding.service)
        from ding.service.hooks import attach_serial_service  # deferred: the run service loads only when asked for

        try:
            parts.service = attach_serial_service(parts)
        except BaseException:
            for close in closables:
                try:
                    close()
                except Exception:
                    pass
            raise
        if parts.service is not None:
            closables.insert(0, parts.service.close)
            if replay_client is not None:
                from ding.service.replay_metrics import watch_replay  # deferred: the replay extra

                watch_replay(parts.service, parts.buffer)
    return parts


def log_replay_state(learner: Any, before: str, after: str) -> None:
    """A line in the learner's log (and on the console) when the replay service's client changes state."""
    learner.info(f'replay service: {before} -> {after}', console=True)


def log_insert_retry(learner: Any, failures: int, error: str) -> None:
    """A line in the log for each failed insert (on the console for the first of a series): it is retried."""
    learner.info(f'replay service: insert failed ({failures} in a row: {error}); retrying', console=failures == 1)


def agree_run_dir(ranks: RankGroup, exp_name: str, resume_path: str | None) -> tuple[str, str | None]:
    """Rank 0's run directory (it may have renewed it) and resume checkpoint, on every rank."""
    if not ranks.several:
        return exp_name, resume_path
    shared_name, shared_resume = ranks.share_texts(exp_name, resume_path or '')
    return shared_name, shared_resume or None


def start_rank_run(parts: Any) -> None:
    """With several ranks: say so in rank 0's log, and keep ``ding --nproc`` told of rank 0's iteration."""
    ranks, learner = parts.ranks, parts.learner
    if ranks.several and ranks.is_main:
        line = f'[ding] {ranks.describe(parts.cfg.exp_name)}'
        say(line)
        learner.logger.info(line, extra=FILE_ONLY)
    if ranks.is_main:
        parts.rank_progress = RankProgressFile.from_environment()
        if parts.rank_progress is not None:
            parts.rank_progress.start(parts.cfg.exp_name, learner.train_iter)
            parts.closables.append(parts.rank_progress.close)


def count_envsteps(parts: Any, local_envstep: int, train_iter: int) -> int:
    """End of a loop: the run's env steps (summed over the ranks), shown on the progress bar and told to the
    launcher."""
    parts.envstep = parts.ranks.total(local_envstep)
    parts.progress.update(parts.envstep, train_iter)
    if parts.rank_progress is not None:
        parts.rank_progress.update(train_iter)
    return parts.envstep


def export_snapshot_gauges(
    service: Any, prefix: str, descriptions: dict[str, str], snapshot: Callable[[], dict[str, float]]
) -> None:
    """Each ``name`` of ``descriptions`` as the gauge ``<prefix>_<name>`` on the run service's ``/metrics``, read
    from ``snapshot()`` when scraped (nothing when the service exports no metrics)."""
    metrics = service.metrics
    if metrics is None:
        return
    from prometheus_client import Gauge  # deferred: the run service loads only when asked for

    def reader(name: str) -> Callable[[], float]:
        return lambda: snapshot()[name]

    for name, what in descriptions.items():
        Gauge(f'{prefix}_{name}', what, registry=metrics.registry).set_function(reader(name))


def save_interrupt_checkpoint(learner: Any) -> None:
    """Write ``interrupt_iteration_{n}`` for a run stopped by Ctrl-C / SIGTERM; a disk that refuses it raises one
    ``StorageError`` naming the file and saying the run was interrupted (the iteration is not saved)."""
    try:
        learner.save_checkpoint(f'interrupt_iteration_{learner.train_iter}')
    except StorageError as exc:
        raise StorageError(f'interrupted; {exc}', exc) from None


def finish_run(parts: FinishableRun, solved: bool, reason: str) -> str:
    """Print the summary line (rank 0; the others log it to their own files) and close every component, even
    when one of them fails to close. Every rank logs a digest of its parameters (identical on every rank)."""
    errors = []
    line = ''
    try:
        if parts.service is not None:
            parts.service.end_run(solved, reason)
        envstep = parts.envstep if parts.ranks.several else parts.collector.envstep
        if parts.ranks.is_main:
            line = parts.progress.close(
                solved,
                envstep,
                parts.learner.train_iter,
                getattr(parts.evaluator, 'best_return', None),
                parts.cfg.env.get('stop_value'),
                reason,
                parts.cfg.get('seed'),
            )
            parts.learner.logger.info(line, extra=FILE_ONLY)  # the console got it from progress.close
        else:
            parts.learner.info(f'rank {parts.ranks.rank} stopped: {reason}, iteration {parts.learner.train_iter}')
        if parts.ranks.several:
            digest = parameter_digest(parts.policy.learn_mode.state_dict())
            parts.learner.info(f'rank {parts.ranks.rank} parameters digest {digest}')
    finally:
        for close in parts.closables:
            try:
                close()
            except Exception as exc:  # keep closing the rest; report afterwards
                errors.append(exc)
    if errors:
        raise RuntimeError(f'errors while closing the pipeline: {errors!r}')
    return line


def run_serial_loop(
    parts: SerialParts, train_on: Callable[[list], None], max_train_iter: int | None, max_env_step: int | None
) -> None:
    """The loop both serial pipelines share: gate, evaluate, collect, ``train_on(new_data)``, stop checks
    (a limit of None: no limit; ``max_env_step`` counts every rank's env steps).

    Ends on the stop value, a limit, a terminate request or Ctrl-C (after writing an interrupt
    checkpoint; one the disk refuses raises ``StorageError`` naming it and the iteration not saved); always
    prints the summary line and closes every component. With several ranks, rank 0 evaluates and runs the
    service, and every stop is agreed by all ranks before any of them acts on it.
    """
    learner, collector, evaluator, commander = parts.learner, parts.collector, parts.evaluator, parts.commander
    service = parts.service  # run control / metrics (ding.service); None unless cfg.service asks for it (rank 0)
    ranks = parts.ranks
    vote_terminate = ranks.several and bool(parts.cfg.get('service'))  # only rank 0 runs a service
    stop, reason = False, 'interrupted'
    try:
        learner.call_hook('before_run')
        while True:
            # Between iterations: pause waits here, tunes are applied, terminate writes the final checkpoint.
            terminate = service is not None and not service.gate(learner.train_iter, parts.envstep)
            if ranks.any(terminate) if vote_terminate else terminate:
                reason = 'terminated'
                break
            collect_kwargs = commander.step()
            if evaluator.should_eval(learner.train_iter):
                if ranks.is_main:
                    stop, eval_info = evaluator.eval(learner.save_checkpoint, learner.train_iter, parts.envstep)
                    parts.progress.record_eval(eval_info['eval_episode_return_mean'], parts.envstep, learner.train_iter)
                stop = ranks.any(stop)
                if stop:
                    reason = 'solved'
                    break
            train_on(collector.collect(train_iter=learner.train_iter, policy_kwargs=collect_kwargs))
            limit = stop_reason(
                count_envsteps(parts, collector.envstep, learner.train_iter),
                learner.train_iter,
                max_env_step,
                max_train_iter,
            )
            if limit is not None:
                reason = limit
                break
        learner.call_hook('after_run')
    except KeyboardInterrupt:
        save_interrupt_checkpoint(learner)
        raise
    finally:
        finish_run(parts, stop, reason)
