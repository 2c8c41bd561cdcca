"""The async actor-learner pipeline (Sebulba design): actor threads step vectorised envs and queue unrolls,
the learner trains on batches of them and stages its newest weights for the actors' next cycle.

``ding -m async -c cfg.py -s 0``, or ``async_pipeline((main_config, create_config), seed=0)``. The config's
``policy.async_actor`` section (``ding.worker.async_actor.config``) and docs/async.md say what runs where.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import torch
from easydict import EasyDict

from ding.config import compile_config
from ding.config.bounds import BOUNDS
from ding.config.errors import ConfigError
from ding.config.validate import raise_problems, unknown_keys_allowed, validate_section
from ding.envs.vector import make_vector_env, read_settings
from ding.policy import create_policy, get_policy_cls
from ding.torch_utils import configure_torch_threads
from ding.utils import config_hash, set_pkg_seed
from ding.utils.cpu_affinity import cores_problem, pin_calling_thread
from ding.utils.log_helper import build_summary_writer
from ding.utils.registry import import_module
from ding.utils.stop_request import StopRequest, signals_request_stop
from ding.worker import BaseLearner
from ding.worker.async_actor import (
    ASYNC_ACTOR_DEFAULTS,
    ActorPool,
    AsyncActorPolicy,
    AsyncActorSettings,
    LearnerFeed,
    VectorEvaluator,
)
from ding.worker.resume import register_checkpoint_extras, resolve_resume, restore_serial_state

from .pipeline_parts import (
    agree_run_dir,
    count_envsteps,
    finish_run,
    load_input_config,
    save_interrupt_checkpoint,
    start_rank_run,
)
from .progress import RunProgress
from .rank_group import RankGroup, stop_reason
from .rank_launcher import RankProgressFile

ASYNC_SECTION = 'policy.async_actor'
EVAL_SEED_OFFSET = 100_000  # evaluation envs never share seeds with the actors' envs


@dataclass
class AsyncParts:
    """What an async run is made of (the fields ``finish_run`` and the run service read included)."""

    cfg: EasyDict
    policy: Any
    learner: BaseLearner
    pool: ActorPool
    feed: LearnerFeed
    evaluator: VectorEvaluator | None  # None when eval_freq is 0 (no eval envs are made)
    settings: AsyncActorSettings
    tb_logger: Any
    progress: RunProgress
    closables: list[Callable[[], None]] = field(default_factory=list)
    resume_path: str | None = None
    service: Any = None
    buffer: Any = None  # no replay buffer: the run service's tunables read this
    ranks: RankGroup = field(default_factory=RankGroup)  # this process's rank (rank 0 of 1 without a group)
    envstep: int = 0  # env steps of the run: every rank's feed summed
    rank_progress: RankProgressFile | None = None  # where rank 0 tells `ding --nproc` its iteration
    stop: StopRequest = field(default_factory=StopRequest)  # Ctrl-C / SIGTERM, acted on between iterations

    @property
    def collector(self) -> LearnerFeed:
        """The env-step counter ``finish_run`` and checkpoints read (the feed counts what the learner took)."""
        return self.feed


def check_async_config(cfg: Any) -> AsyncActorSettings:
    """Validate ``policy.async_actor`` (unknown keys with 'did you mean', types, bounds) and the vectorised-env
    keys of ``env``, before any work; return the settings. Raises ``ConfigError`` naming the key."""
    section = (cfg.get('policy') or {}).get('async_actor') or {}
    problems: list[str] = []
    if not isinstance(section, dict):
        raise ConfigError(f'{ASYNC_SECTION}: expected a dict (section), got {type(section).__name__}')
    allow = unknown_keys_allowed() or cfg.get('allow_unknown_keys') is True  # the escape hatch of compile_config
    validate_section(section, ASYNC_ACTOR_DEFAULTS, ASYNC_SECTION, BOUNDS, problems, allow_unknown_keys=allow)
    if section.get('cpu_affinity') is not None:
        problem = cores_problem(section['cpu_affinity'], f'{ASYNC_SECTION}.cpu_affinity')
        if problem is not None:
            problems.append(problem)
    raise_problems(problems)
    settings = AsyncActorSettings.from_config(section)
    if settings.double_buffer and settings.env_per_actor % 2:
        raise ConfigError(
            f'{ASYNC_SECTION}.env_per_actor = {settings.env_per_actor} must be even with double_buffer=True '
            '(two env groups of env_per_actor / 2 envs per actor)'
        )
    env_cfg = cfg.get('env') or {}
    if not env_cfg.get('env_id'):
        raise ConfigError('env.env_id is missing: the gymnasium / EnvPool id the actors step (e.g. CartPole-v1)')
    try:
        read_settings(env_cfg, False)
    except ValueError as exc:
        raise ConfigError(f'env: {exc}') from None
    return settings


def policy_class_of(create_cfg: EasyDict) -> Any:
    """The policy class ``create_config.policy`` names (its modules imported); a ConfigError when it is not one."""
    section = create_cfg.get('policy')
    if not isinstance(section, dict) or not section.get('type'):
        raise ConfigError('create_config.policy.type is missing (the registered name of the policy, e.g. impala)')
    import_module(section.get('import_names', []))
    try:
        return get_policy_cls(section)
    except KeyError as exc:
        raise ConfigError(f'create_config.policy.type: {exc.args[0]}') from None


ACTOR_METHODS = ('actor_model', 'actor_weights', 'initial_actor_state', 'actor_step')


def as_actor_policy(policy: Any, policy_type: str) -> AsyncActorPolicy:
    """``policy`` (an instance or its class) as an ``AsyncActorPolicy``; a ConfigError naming the type when
    it is not one (e.g. ppo)."""
    missing = [name for name in ACTOR_METHODS if not callable(getattr(policy, name, None))]
    if missing:
        raise ConfigError(
            f'create_config.policy.type = {policy_type!r} cannot run in the async pipeline: it lacks {missing} '
            '(ding.worker.async_actor.protocol.AsyncActorPolicy; e.g. impala implements it)'
        )
    return cast(AsyncActorPolicy, policy)


def close_all(closables: list[Callable[[], None]]) -> None:
    """Call every closer, best effort: one failing must not keep the others from releasing their resources."""
    for close in closables:
        try:
            close()
        except Exception:
            pass


def build_async_parts(
    cfg: EasyDict,
    create_cfg: EasyDict,
    seed: int,
    model: torch.nn.Module | None,
    max_env_step: int | None,
    resume: Any = None,
    allocate_per_step: bool = False,
) -> AsyncParts:
    """Check and compile the config (before any work), then build the policy, learner, actors and evaluator."""
    resume_path = resolve_resume(cfg, resume)
    settings = check_async_config(cfg)
    policy_cls = policy_class_of(create_cfg)
    as_actor_policy(policy_cls, create_cfg.policy.type)
    ranks = RankGroup.current()
    if ranks.several and settings.cpu_affinity is not None:
        raise ConfigError(
            f'{ASYNC_SECTION}.cpu_affinity confines one process; with {ranks.world_size} ranks on the same config '
            'every rank would share those cores: leave it None'
        )
    if ranks.several:
        cfg.world_size = ranks.world_size
    cfg = compile_config(
        cfg,
        seed=seed + ranks.rank,  # each rank's actors step envs of their own seeds
        policy=policy_cls,
        create_cfg=create_cfg,
        save_cfg=ranks.is_main,
        renew_dir=resume_path is None,
    )
    cfg.exp_name, resume_path = agree_run_dir(ranks, cfg.exp_name, resume_path)
    log_exp = ranks.log_exp_name(cfg.exp_name)
    if cfg.get('service') is not None:  # a bad service section fails here, before any env is built
        from ding.service import check_service_config  # deferred: the run service loads only when asked for

        check_service_config(cfg.service)
    if resume_path is not None and cfg.policy.learn.learner.hook.get('load_ckpt_before_run'):
        cfg.policy.learn.learner.hook.load_ckpt_before_run = ''  # the resumed state must not be overwritten
    set_pkg_seed(cfg.seed, use_cuda=cfg.policy.cuda)
    configure_torch_threads()  # one intra-op thread: actors and learner each compute on their own thread

    closables: list[Callable[[], None]] = []
    if settings.cpu_affinity is not None:  # first: every thread the run starts (actors, EnvPool's) inherits them
        closables.append(pin_calling_thread(settings.cpu_affinity))
    try:
        policy = create_policy(cfg.policy, model=model, enable_field=['learn'])
        actor_policy = as_actor_policy(policy, cfg.policy.type)
        tb_logger = build_summary_writer(os.path.join(f'./{log_exp}/log/', 'async'))
        closables.append(tb_logger.close)
        learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode, tb_logger, exp_name=log_exp)
        learner.config_hash = config_hash(cfg)
        learner.run_config = cfg  # the config snapshot of a remote checkpoint's MANIFEST.json
        closables.insert(0, learner.close)
        pool = ActorPool(
            actor_policy,
            settings,
            partial(make_vector_env, cfg.env),
            seed=cfg.seed,
            allocate_per_step=allocate_per_step,
        )
        closables.insert(0, lambda: _stop_actors(pool))  # first: no actor keeps stepping while the rest closes
        evaluator = None
        eval_cfg = cfg.policy.eval.evaluator
        if int(eval_cfg.eval_freq) > 0 and ranks.is_main:  # rank 0 alone evaluates
            n_episode = int(eval_cfg.n_episode)
            eval_seed = cfg.seed + EVAL_SEED_OFFSET
            eval_env = make_vector_env(
                cfg.env, int(cfg.env.get('evaluator_env_num') or n_episode), eval_seed, for_eval=True
            )
            evaluator = VectorEvaluator(eval_env, actor_policy, n_episode, eval_seed, cfg.env.get('stop_value'))
            closables.insert(1, evaluator.close)
        stop = StopRequest()
        feed = LearnerFeed(pool, settings.updates_per_batch, check=stop.check)
        register_checkpoint_extras(learner, feed, evaluator)
        if resume_path is not None:
            # Rank 0's RNG streams are in the checkpoint: the other ranks keep their own.
            restore_serial_state(learner, feed, evaluator, None, resume_path, restore_rng=ranks.is_main)
        progress = RunProgress(cfg.exp_name, max_env_step, enabled=ranks.is_main)
        parts = AsyncParts(cfg, policy, learner, pool, feed, evaluator, settings, tb_logger, progress)
        parts.closables, parts.resume_path, parts.stop = closables, resume_path, stop
        parts.ranks, parts.envstep = ranks, ranks.total(feed.envstep)
        start_rank_run(parts)
        if (
            cfg.get('service') and ranks.is_main
        ):  # run control / metrics / weights server, JSON event log (ding.service)
            from ding.service.async_service import (  # deferred: the run service loads only when asked for
                attach_async_service,
            )

            parts.service = attach_async_service(parts)
            if parts.service is not None:
                closables.insert(1, parts.service.close)
    except BaseException:
        close_all(closables)
        raise
    return parts


def _stop_actors(pool: ActorPool) -> None:
    left = pool.stop()
    if left:
        raise RuntimeError(f'actor threads still running after stop: {[t.name for t in left]}')


def _evaluate(parts: AsyncParts) -> bool:
    """Evaluate the learner's current weights; save ``ckpt_best`` on a new best; True when solved."""
    learner, evaluator = parts.learner, parts.evaluator
    assert evaluator is not None  # built whenever eval_freq > 0
    best_before = evaluator.best_return
    stop, info = evaluator.eval(parts.policy.actor_weights())
    mean = info['eval_episode_return_mean']
    envstep = parts.envstep
    parts.progress.record_eval(mean, envstep, learner.train_iter)
    learner.info(
        f'evaluation at iteration {learner.train_iter}, env step {envstep}: return mean {mean:.2f} '
        f'(std {info["eval_episode_return_std"]:.2f}, {int(info["eval_episode_count"])} episodes)'
    )
    for key, value in info.items():
        parts.tb_logger.add_scalar(f'evaluator_step/{key}', value, envstep)
    if mean > best_before:
        learner.save_checkpoint('ckpt_best')
    return stop


def run_async_loop(parts: AsyncParts, max_train_iter: int | None, max_env_step: int | None) -> None:
    """Train until solved, a limit, terminate, an actor failure or Ctrl-C / SIGTERM (which write an interrupt
    checkpoint); always stop the actors, print the summary line and close everything. With several ranks each
    runs its own actors, rank 0 evaluates, and every stop is agreed by all ranks (``ding.entry.rank_group``)."""
    learner, feed, pool, policy, service = parts.learner, parts.feed, parts.pool, parts.policy, parts.service
    ranks = parts.ranks
    vote_terminate = ranks.several and bool(parts.cfg.get('service'))  # only rank 0 runs a service
    learn_cfg = parts.cfg.policy.learn
    eval_freq = int(parts.cfg.policy.eval.evaluator.eval_freq)
    solved, reason = False, 'interrupted'
    last_eval: int | None = None
    announced = False
    with signals_request_stop(parts.stop):
        try:
            learner.call_hook('before_run')
            pool.staging.publish(learner.train_iter, policy.actor_weights())
            pool.start()
            while True:
                parts.stop.check()
                # Between iterations: pause waits here, tunes are applied, terminate writes the final checkpoint.
                terminate = service is not None and not service.gate(learner.train_iter, parts.envstep)
                if ranks.any(terminate) if vote_terminate else terminate:
                    reason = 'terminated'
                    break
                if eval_freq > 0 and (last_eval is None or learner.train_iter - last_eval >= eval_freq):
                    last_eval = learner.train_iter
                    if ranks.any(parts.evaluator is not None and _evaluate(parts)):
                        solved, reason = True, 'solved'
                        break
                batch, lag = feed.next_batch(int(learn_cfg.batch_size), learner.train_iter)
                if not announced:  # every actor has built its model by its first unroll
                    announced = True
                    learner.info(
                        f'actors: {parts.settings.actor_num} threads x {parts.settings.env_per_actor} envs, '
                        f'inference in {pool.inference_engine()}'
                    )
                scalar = learner.log_buffer['scalar']
                scalar.update(lag.scalars())
                scalar['trajectory_queue'] = pool.trajectories.qsize()
                if parts.settings.drop_when_full:
                    scalar['dropped_trajectories'] = pool.trajectories.dropped
                learner.train(batch, feed.envstep)
                pool.staging.publish(learner.train_iter, policy.actor_weights())
                envstep = count_envsteps(parts, feed.envstep, learner.train_iter)
                limit = stop_reason(envstep, learner.train_iter, max_env_step, max_train_iter)
                if limit is not None:
                    reason = limit
                    break
            pool.stop()
            learner.call_hook('after_run')
        except KeyboardInterrupt:
            pool.stop()
            save_interrupt_checkpoint(learner)
            raise
        except BaseException as exc:
            reason = f'error: {type(exc).__name__}'
            raise
        finally:
            finish_run(parts, solved, reason)


def async_pipeline(
    input_cfg: str | tuple[dict, dict],
    seed: int = 0,
    model: torch.nn.Module | None = None,
    max_train_iter: int | None = int(1e10),
    max_env_step: int | None = int(1e10),
    resume: str | None = None,
) -> Any:
    """Train with actor threads and a learner until ``env.stop_value``, ``max_train_iter`` or ``max_env_step``.

    ``input_cfg`` is a config file path or a ``(main_config, create_config)`` pair; ``resume`` as in
    ``serial_pipeline``. Returns the policy.
    """
    cfg, create_cfg = load_input_config(input_cfg)
    parts = build_async_parts(cfg, create_cfg, seed, model, max_env_step, resume)
    run_async_loop(parts, max_train_iter, max_env_step)
    return parts.policy


__all__ = ['async_pipeline', 'build_async_parts', 'run_async_loop', 'check_async_config', 'AsyncParts']
