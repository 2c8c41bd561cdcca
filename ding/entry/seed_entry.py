"""The SEED pipeline (central inference): actor processes step envs and send observations; the learner's
inference server acts for all of them at once with the newest model and assembles what it saw into
trajectories, which the learner trains on. No policy download, no sample files.

``ding -m seed -c cfg.py -s 0``, or ``seed_pipeline((main_config, create_config), seed=0)``. Two algorithms:
SEED DQN (``policy.type='dqn'``: transitions into a replay buffer on the learner side, epsilon per actor as
Ape-X) and SEED A2C / IMPALA (a policy of the async actor protocol, e.g. ``'impala'``: unrolls trained by it).
The ``policy.seed`` section (``ding.worker.seed.config``) and docs/seed.md say what runs where.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from easydict import EasyDict

from ding.config import compile_config
from ding.config.errors import ConfigError
from ding.config.validate import raise_problems, unknown_keys_allowed, validate_section
from ding.envs.vector import make_vector_env, read_settings
from ding.policy import create_policy
from ding.torch_utils import configure_torch_threads
from ding.utils import config_hash, set_pkg_seed
from ding.utils.log_helper import build_summary_writer
from ding.utils.stop_request import StopRequest, signals_request_stop
from ding.worker import BaseLearner
from ding.worker.async_actor import AsyncActorPolicy, StagingQueue, TrajectoryQueue, VectorEvaluator
from ding.worker.replay_buffer import NaiveReplayBuffer, create_buffer
from ding.worker.resume import register_checkpoint_extras, resolve_resume, restore_serial_state
from ding.worker.seed.acting import BatchActing, QNetActing
from ding.worker.seed.assembly import TransitionAssembler, UnrollAssembler
from ding.worker.seed.config import SEED_BOUNDS, SEED_DEFAULTS, SeedSettings
from ding.worker.seed.feed import SeedFeed
from ding.worker.seed.processes import ActorProcesses
from ding.worker.seed.server import InferenceServer, follow_run_control
from ding.worker.seed.transport import SlotLayout, new_secret, remote_run_secret

from .async_entry import EVAL_SEED_OFFSET, as_actor_policy, close_all, policy_class_of
from .pipeline_parts import export_snapshot_gauges, finish_run, load_input_config, save_interrupt_checkpoint
from .progress import RunProgress
from .rank_group import RankGroup

SEED_SECTION = 'policy.seed'


@dataclass
class SeedParts:
    """What a SEED run is made of (the fields ``finish_run`` and the run service read included)."""

    cfg: EasyDict
    policy: Any
    learner: BaseLearner
    server: InferenceServer
    actors: ActorProcesses
    feed: SeedFeed
    staging: StagingQueue
    acting_policy: AsyncActorPolicy
    evaluator: VectorEvaluator | None
    settings: SeedSettings
    tb_logger: Any
    progress: RunProgress
    buffer: Any = None  # SEED DQN's replay buffer
    closables: list[Callable[[], None]] = field(default_factory=list)
    resume_path: str | None = None
    service: Any = None
    ranks: RankGroup = field(default_factory=RankGroup)  # SEED runs on one rank: the learner holds the model
    stop: StopRequest = field(default_factory=StopRequest)  # Ctrl-C / SIGTERM, acted on between iterations

    @property
    def envstep(self) -> int:
        """Env steps of the run (what the feed handed to the learner)."""
        return self.feed.envstep

    @property
    def collector(self) -> SeedFeed:
        """The env-step counter ``finish_run`` and checkpoints read (the feed counts what the learner took)."""
        return self.feed

    @property
    def is_dqn(self) -> bool:
        return self.buffer is not None


def check_seed_config(cfg: Any, policy_type: str) -> SeedSettings:
    """Validate ``policy.seed`` (unknown keys, types, bounds), the env keys and what SEED supports of the
    policy, before any work; the settings. Raises ``ConfigError`` naming the key."""
    policy_cfg = cfg.get('policy') or {}
    section = policy_cfg.get('seed') or {}
    if not isinstance(section, dict):
        raise ConfigError(f'{SEED_SECTION}: expected a dict (section), got {type(section).__name__}')
    problems: list[str] = []
    allow = unknown_keys_allowed() or cfg.get('allow_unknown_keys') is True
    validate_section(section, SEED_DEFAULTS, SEED_SECTION, SEED_BOUNDS, problems, allow_unknown_keys=allow)
    raise_problems(problems)
    settings = SeedSettings.from_config(section)
    if settings.listen is not None:  # remote actors: the address, their number and the shared secret
        try:
            remote_run_secret(settings.listen, settings.remote_actor_num)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    env_cfg = cfg.get('env') or {}
    if not env_cfg.get('env_id'):
        raise ConfigError('env.env_id is missing: the gymnasium / EnvPool id the actors step (e.g. CartPole-v1)')
    try:
        read_settings(env_cfg, False)
    except ValueError as exc:
        raise ConfigError(f'env: {exc}') from None
    nstep = policy_cfg.get('nstep', 1)
    if policy_type == 'dqn' and (isinstance(nstep, bool) or not isinstance(nstep, int) or nstep < 1):
        raise ConfigError(f'policy.nstep = {nstep!r}: expected an int >= 1 (the steps of an n-step return)')
    if policy_type == 'dqn' and (policy_cfg.get('model') or {}).get('lstm_hidden_size'):
        raise ConfigError('policy.model.lstm_hidden_size: SEED DQN runs feed-forward Q networks only (None)')
    return settings


def _acting_policy(policy: Any, policy_type: str) -> AsyncActorPolicy:
    if policy_type == 'dqn':
        return QNetActing(policy.learn_mode.get_attribute('model'))
    return as_actor_policy(policy, policy_type)


def build_seed_parts(
    cfg: EasyDict, create_cfg: EasyDict, seed: int, model: torch.nn.Module | None, max_env_step: int | None, resume: Any
) -> SeedParts:
    """Check and compile the config (before any work), then build the learner, server, actors and evaluator
    (the actor processes start with the run)."""
    resume_path = resolve_resume(cfg, resume)
    policy_cls = policy_class_of(create_cfg)
    policy_type = create_cfg.policy.type
    settings = check_seed_config(cfg, policy_type)
    is_dqn = policy_type == 'dqn'
    if not is_dqn:
        as_actor_policy(policy_cls, policy_type)
    cfg = compile_config(
        cfg,
        seed=seed,
        policy=policy_cls,
        buffer=NaiveReplayBuffer if is_dqn else None,
        create_cfg=create_cfg,
        save_cfg=True,
        renew_dir=resume_path is None,
    )
    if cfg.get('service') is not None:  # a bad service section fails here, before any env is built
        from ding.service import check_service_config  # deferred: the run service loads only when asked for

        check_service_config(cfg.service)
    if resume_path is not None and cfg.policy.learn.learner.hook.get('load_ckpt_before_run'):
        cfg.policy.learn.learner.hook.load_ckpt_before_run = ''  # the resumed state must not be overwritten
    set_pkg_seed(cfg.seed, use_cuda=cfg.policy.cuda)
    configure_torch_threads()  # one intra-op thread: the server and the learner each compute on their own

    closables: list[Callable[[], None]] = []
    try:
        policy = create_policy(cfg.policy, model=model, enable_field=['learn'])
        acting_policy = _acting_policy(policy, policy_type)
        tb_logger = build_summary_writer(os.path.join(f'./{cfg.exp_name}/log/', 'seed'))
        closables.append(tb_logger.close)
        learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode, tb_logger, exp_name=cfg.exp_name)
        learner.config_hash = config_hash(cfg)
        learner.run_config = cfg  # the config snapshot of a remote checkpoint's MANIFEST.json
        closables.append(learner.close)
        eval_seed = cfg.seed + EVAL_SEED_OFFSET
        eval_cfg = cfg.policy.eval.evaluator
        n_episode = int(eval_cfg.n_episode)
        # The evaluation envs also tell the slot layout (a probe env of one when there is no evaluation).
        probe = make_vector_env(cfg.env, int(cfg.env.get('evaluator_env_num') or n_episode), eval_seed, for_eval=True)
        closables.append(probe.close)
        layout = SlotLayout(settings.env_per_actor, tuple(probe.observation_shape), probe.action_num)
        evaluator = None
        if int(eval_cfg.eval_freq) > 0:
            evaluator = VectorEvaluator(probe, acting_policy, n_episode, eval_seed, cfg.env.get('stop_value'))
        buffer = None
        if is_dqn:
            buffer = create_buffer(cfg.policy.other.replay_buffer, tb_logger=tb_logger, exp_name=cfg.exp_name)
            closables.append(buffer.close)
        queue: TrajectoryQueue[Any] = TrajectoryQueue(settings.queue_size)
        staging = StagingQueue(1)
        all_actors = settings.actor_num + (settings.remote_actor_num if settings.listen else 0)
        eps = [settings.actor_eps(i) for i in range(all_actors)] if is_dqn else None
        acting = BatchActing(acting_policy, staging, eps)
        assembler: TransitionAssembler | UnrollAssembler
        if is_dqn:
            nstep, gamma = int(cfg.policy.nstep), float(cfg.policy.discount_factor)
            assembler = TransitionAssembler(settings.unroll_len, layout, queue, nstep, gamma)
        else:  # a recurrent model's unrolls carry the actor state the acting kept
            assembler = UnrollAssembler(settings.unroll_len, layout, queue, acting.state_before)
        socket_dir = tempfile.mkdtemp(prefix='ding-seed-')
        closables.append(lambda: shutil.rmtree(socket_dir, ignore_errors=True))
        secret = remote_run_secret(settings.listen, settings.remote_actor_num) if settings.listen else new_secret()
        server = InferenceServer(
            os.path.join(socket_dir, 'inference.sock'),
            secret,
            layout,
            settings.actor_num,
            acting,
            assembler,
            settings.max_batch,
            settings.max_wait_us,
            settings.actor_timeout,
            settings.listen,
            settings.remote_actor_num,
            learner.info,
        )
        if server.remote_address:
            learner.info(
                f'seed: remote actors join on {server.remote_address} (ding seed-actor --connect)', console=True
            )
        # Closed last-in first-out: the actors, then the queues (the server may wait on one), then the server.
        closables += [server.stop, queue.close, staging.close]
        actors = ActorProcesses(
            server.socket_path,
            secret,
            cfg.env,
            settings.actor_num,
            settings.env_per_actor,
            cfg.seed,
            settings.max_actor_restarts,
            actor_timeout=settings.actor_timeout,
        )
        closables.append(lambda: _stop_actor_processes(actors))
        parts = SeedParts(
            cfg, policy, learner, server, actors, SeedFeed(queue, lambda: None), staging, acting_policy,
            evaluator, settings, tb_logger, RunProgress(cfg.exp_name, max_env_step), buffer,
        )  # fmt: skip
        parts.feed.check = lambda: check_health(parts)
        parts.resume_path = resume_path
        register_checkpoint_extras(learner, parts.feed, evaluator)
        if resume_path is not None:
            restore_serial_state(learner, parts.feed, evaluator, None, resume_path)
        if cfg.get('service'):  # run control / metrics / weights server, JSON event log (ding.service)
            from ding.service.hooks import attach_serial_service  # deferred: the run service loads only when asked

            parts.service = attach_serial_service(parts)
            if parts.service is not None:
                closables.append(parts.service.close)
                export_snapshot_gauges(parts.service, 'seed', INFERENCE_METRICS, parts.server.stats.snapshot)
                control = parts.service.control  # a paused run answers no actor at once
                control.add_listener(follow_run_control(server, lambda: control.state))
    except BaseException:
        close_all(closables[::-1])
        raise
    parts.closables = closables[::-1]
    return parts


INFERENCE_METRICS = {
    'inference_batch_mean': 'Mean observations per forward of the SEED inference server',
    'queue_delay_us_mean': 'Mean microseconds a SEED request waited for its forward',
    'latency_us_p50': 'Median microseconds from a SEED request read to its answer written',
    'latency_us_p99': '99th percentile of the SEED request latency, microseconds',
    'dropped_actors': 'SEED actors dropped (closed, crashed, hung or broke the protocol)',
}


def _stop_actor_processes(actors: ActorProcesses) -> None:
    killed = actors.stop()
    if killed:
        raise RuntimeError(f'seed actors {killed} ignored SIGTERM and were killed')


def check_health(parts: SeedParts) -> None:
    """Raise when a stop was requested or the inference server failed; start again the actor processes that
    died (restarts left)."""
    parts.stop.check()
    server = parts.server
    if server.error is not None:
        raise RuntimeError(f'the inference server failed: {type(server.error).__name__}: {server.error}') from (
            server.error
        )
    if not server.is_alive():
        raise RuntimeError('the inference server stopped')
    for actor_id in parts.actors.restart_dead():
        parts.learner.info(f'seed actor {actor_id} exited; started it again ({parts.actors.restarts} restarts)')


def _evaluate(parts: SeedParts) -> bool:
    """Evaluate the learner's current weights; save ``ckpt_best`` on a new best; True when solved."""
    learner, evaluator = parts.learner, parts.evaluator
    assert evaluator is not None
    best_before = evaluator.best_return
    stop, info = evaluator.eval(parts.acting_policy.actor_weights())
    mean = info['eval_episode_return_mean']
    parts.progress.record_eval(mean, parts.feed.envstep, learner.train_iter)
    learner.info(f'evaluation at iteration {learner.train_iter}, env step {parts.feed.envstep}: return mean {mean:.2f}')
    for key, value in info.items():
        parts.tb_logger.add_scalar(f'evaluator_step/{key}', value, parts.feed.envstep)
    if mean > best_before:
        learner.save_checkpoint('ckpt_best')
    return stop


def _train_once(parts: SeedParts) -> None:
    """One round of the learner: an IMPALA batch of unrolls, or the new transitions pushed and
    ``update_per_collect`` DQN updates once the buffer holds a batch."""
    learner, feed, learn_cfg = parts.learner, parts.feed, parts.cfg.policy.learn
    batch_size = int(learn_cfg.batch_size)
    scalar = learner.log_buffer['scalar']
    if not parts.is_dqn:
        batch = feed.unroll_batch(batch_size, learner.train_iter)
        assert feed.last_lag is not None
        scalar.update(feed.last_lag.scalars())
        scalar.update(_server_scalars(parts))
        learner.train(batch, feed.envstep)
        return
    for chunk in feed.transition_chunks():
        parts.buffer.push(chunk.transitions(), feed.envstep)
    if parts.buffer.count() < batch_size:
        return
    for _ in range(int(learn_cfg.get('update_per_collect', 1))):
        data = parts.buffer.sample(batch_size, learner.train_iter)
        if data is None:
            return
        scalar.update(_server_scalars(parts))
        learner.train(data, feed.envstep)


def _server_scalars(parts: SeedParts) -> dict[str, float]:
    stats = parts.server.stats.snapshot()
    keys = ('inference_batch_mean', 'queue_delay_us_mean', 'latency_us_p50', 'latency_us_p99', 'dropped_actors')
    return {key: stats[key] for key in keys}


def run_seed_loop(parts: SeedParts, max_train_iter: int | None, max_env_step: int | None) -> None:
    """Train until solved, a limit, terminate, a failure or Ctrl-C / SIGTERM (which write an interrupt
    checkpoint); always stop the actors and the server, print the summary line and close everything."""
    learner, feed, service = parts.learner, parts.feed, parts.service
    eval_freq = int(parts.cfg.policy.eval.evaluator.eval_freq)
    solved, reason = False, 'interrupted'
    last_eval: int | None = None
    with signals_request_stop(parts.stop):
        try:
            learner.call_hook('before_run')
            parts.staging.publish(learner.train_iter, parts.acting_policy.actor_weights())
            parts.server.start()
            parts.actors.start_all()
            while True:
                if service is not None and not service.gate(learner.train_iter, feed.envstep):
                    reason = 'terminated'
                    break
                if eval_freq > 0 and (last_eval is None or learner.train_iter - last_eval >= eval_freq):
                    last_eval = learner.train_iter
                    if _evaluate(parts):
                        solved, reason = True, 'solved'
                        break
                _train_once(parts)
                parts.staging.publish(learner.train_iter, parts.acting_policy.actor_weights())
                parts.progress.update(feed.envstep, learner.train_iter)
                check_health(parts)
                if max_env_step is not None and feed.envstep >= max_env_step:
                    reason = 'max_env_step reached'
                    break
                if max_train_iter is not None and learner.train_iter >= max_train_iter:
                    reason = 'max_train_iter reached'
                    break
            parts.actors.stop()
            learner.call_hook('after_run')
        except KeyboardInterrupt:
            parts.actors.stop()
            save_interrupt_checkpoint(learner)
            raise
        except BaseException as exc:
            reason = f'error: {type(exc).__name__}'
            raise
        finally:
            stats = parts.server.stats.snapshot()
            learner.info(
                'seed inference: batch mean {:.1f} obs, queueing {:.0f} us, latency p50 {:.0f} / p99 {:.0f} us, '
                '{:.0f} actors dropped'.format(
                    stats['inference_batch_mean'],
                    stats['queue_delay_us_mean'],
                    stats['latency_us_p50'],
                    stats['latency_us_p99'],
                    stats['dropped_actors'],
                )
            )
            finish_run(parts, solved, reason)


def seed_pipeline(
    input_cfg: str | tuple[dict, dict],
    seed: int = 0,
    model: torch.nn.Module | None = None,
    max_train_iter: int | None = int(1e10),
    max_env_step: int | None = int(1e10),
    resume: str | None = None,
) -> Any:
    """Train with SEED actor processes and central inference until ``env.stop_value`` or a limit.

    ``input_cfg`` is a config file path or a ``(main_config, create_config)`` pair; ``resume`` as in
    ``serial_pipeline``. Returns the policy.
    """
    cfg, create_cfg = load_input_config(input_cfg)
    parts = build_seed_parts(cfg, create_cfg, seed, model, max_env_step, resume)
    run_seed_loop(parts, max_train_iter, max_env_step)
    return parts.policy


__all__ = ['SeedParts', 'build_seed_parts', 'check_seed_config', 'run_seed_loop', 'seed_pipeline']
