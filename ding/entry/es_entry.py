"""The distributed evolution-strategies pipeline: the learner's ES server and N local worker processes (plus any
``ding es-worker --connect HOST:PORT --token T`` started elsewhere).

``ding -m es -c cfg.py -s 0``, or ``es_pipeline((main_config, create_config), seed=0)``. The server (its own
thread) turns the workers' episode returns into gradient partials and hands each full buffer to this thread,
which runs the update through the ``BaseLearner`` (hooks, checkpoints of the ES state), publishes the new model
(downloaded by every worker in chunks), evaluates the unperturbed model and checks the stop value. The
``policy.es_server`` section (``ding.worker.es.config``) and docs/es.md say what runs where.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from easydict import EasyDict

from ding.config import compile_config
from ding.config.errors import ConfigError
from ding.config.validate import raise_problems, unknown_keys_allowed, validate_section
from ding.envs import create_env_manager, get_vec_env_setting
from ding.policy import create_policy
from ding.policy.es import ESPolicy
from ding.torch_utils import configure_torch_threads
from ding.utils import config_hash, set_pkg_seed
from ding.utils.log_helper import build_summary_writer
from ding.utils.stop_request import StopRequest, signals_request_stop
from ding.worker import BaseLearner, InteractionSerialEvaluator
from ding.worker.es.config import ES_SERVER_BOUNDS, ES_SERVER_DEFAULTS, ESServerSettings
from ding.worker.es.processes import ESWorkerProcesses
from ding.worker.es.server import ESServer
from ding.worker.es.stats import ES_COUNTERS, ESServerStats
from ding.worker.es.worker_main import RUN_SECRET_ENV
from ding.worker.resume import register_checkpoint_extras, resolve_resume, restore_serial_state
from ding.worker.seed.transport import new_secret

from .async_entry import close_all
from .pipeline_parts import export_snapshot_gauges, finish_run, load_input_config, save_interrupt_checkpoint
from .progress import RunProgress
from .rank_group import RankGroup

ES_SECTION = 'policy.es_server'
BATCH_WAIT = 0.5  # seconds the loop waits for a full buffer before it checks the service, the limits and health
# server figures the learner logs with every update (tensorboard / the text log)
LOGGED_COUNTERS = ('connected_workers', 'partials_per_second', 'dropped_partials', 'stale_partials',
                   'skipped_model_updates', 'download_resets', 'bytes_sent')  # fmt: skip


@dataclass
class ESParts:
    """What an ES run is made of (the fields ``finish_run`` and the run service read included)."""

    cfg: EasyDict
    policy: ESPolicy
    learner: BaseLearner
    server: ESServer
    workers: ESWorkerProcesses
    evaluator: InteractionSerialEvaluator
    settings: ESServerSettings
    tb_logger: Any
    progress: RunProgress
    closables: list[Callable[[], None]] = field(default_factory=list)
    resume_path: str | None = None
    service: Any = None
    buffer: Any = None  # no replay buffer (the run service asks)
    ranks: RankGroup = field(default_factory=RankGroup)  # one rank: the server holds the model
    stop: StopRequest = field(default_factory=StopRequest)  # Ctrl-C / SIGTERM, acted on between iterations

    @property
    def envstep(self) -> int:
        """Env steps the workers reported."""
        return self.server.stats.envstep

    @property
    def collector(self) -> ESServerStats:
        """The env-step counter ``finish_run`` and checkpoints read."""
        return self.server.stats


def check_es_config(cfg: Any, create_cfg: Any) -> ESServerSettings:
    """Validate ``policy.es_server`` (unknown keys, types, bounds) and what the pipeline needs of the config,
    before any work; the settings. Raises ``ConfigError`` naming the key."""
    section = (cfg.get('policy') or {}).get('es_server') or {}
    if not isinstance(section, dict):
        raise ConfigError(f'{ES_SECTION}: expected a dict (section), got {type(section).__name__}')
    problems: list[str] = []
    allow = unknown_keys_allowed() or cfg.get('allow_unknown_keys') is True
    validate_section(section, ES_SERVER_DEFAULTS, ES_SECTION, ES_SERVER_BOUNDS, problems, allow_unknown_keys=allow)
    if not isinstance(section.get('host', ''), str):
        problems.append(f'{ES_SECTION}.host: expected a string, got {section["host"]!r}')
    raise_problems(problems)
    try:
        settings = ESServerSettings.from_config(section)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if (create_cfg.get('policy') or {}).get('type') != 'es':
        raise ConfigError(f"create_config.policy.type: the ES pipeline trains policy type 'es', got "
                          f'{(create_cfg.get("policy") or {}).get("type")!r}')  # fmt: skip
    if not (create_cfg.get('env') or {}).get('type'):
        raise ConfigError('create_config.env.type: the ES pipeline evaluates on a ding env (e.g. cartpole)')
    return settings


def build_es_parts(
    cfg: EasyDict, create_cfg: EasyDict, seed: int, model: torch.nn.Module | None, max_env_step: int | None, resume: Any
) -> ESParts:
    """Check and compile the config (before any work), then build the learner, evaluator and server (the server
    and the worker processes start with the run)."""
    resume_path = resolve_resume(cfg, resume)
    settings = check_es_config(cfg, create_cfg)
    cfg = compile_config(cfg, seed=seed, auto=True, create_cfg=create_cfg, save_cfg=True, renew_dir=resume_path is None)
    if cfg.get('service') is not None:  # a bad service section fails here, before any env is built
        from ding.service import check_service_config  # deferred: the run service loads only when asked for

        check_service_config(cfg.service)
    if resume_path is not None and cfg.policy.learn.learner.hook.get('load_ckpt_before_run'):
        cfg.policy.learn.learner.hook.load_ckpt_before_run = ''  # the resumed state must not be overwritten
    set_pkg_seed(cfg.seed, use_cuda=cfg.policy.cuda)
    configure_torch_threads()

    closables: list[Callable[[], None]] = []
    try:
        env_fn, _, evaluator_env_cfg = get_vec_env_setting(cfg.env)
        evaluator_env = create_env_manager(cfg.env.manager, [partial(env_fn, cfg=c) for c in evaluator_env_cfg])
        closables.append(evaluator_env.close)
        evaluator_env.seed(cfg.seed, dynamic_seed=False)
        policy = create_policy(cfg.policy, model=model, enable_field=['learn', 'eval'])
        if not isinstance(policy, ESPolicy):
            raise ConfigError(f"create_config.policy.type 'es' built a {type(policy).__name__}, not an ESPolicy")
        tb_logger = build_summary_writer(os.path.join(f'./{cfg.exp_name}/log/', 'es'))
        closables.append(tb_logger.close)
        learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode, tb_logger, exp_name=cfg.exp_name)
        learner.config_hash = config_hash(cfg)
        learner.run_config = cfg  # the config snapshot of a remote checkpoint's MANIFEST.json
        closables.append(learner.close)
        evaluator = InteractionSerialEvaluator(
            cfg.policy.eval.evaluator, evaluator_env, policy.eval_mode, tb_logger, exp_name=cfg.exp_name
        )
        closables.append(evaluator.close)
        stats = ESServerStats()
        register_checkpoint_extras(learner, stats, evaluator)
        if resume_path is not None:
            restore_serial_state(learner, stats, evaluator, None, resume_path)
        # A token set in the environment lets `ding es-worker` on other hosts join; else a fresh one (local only).
        token = os.environ.get(RUN_SECRET_ENV) or new_secret()
        server = ESServer(policy, settings, token, policy.population_size, cfg.seed, learner.logger, stats)
        closables.append(server.stop)
        workers = ESWorkerProcesses(token, settings.worker_num)
        closables.append(lambda: _stop_workers(workers))
        parts = ESParts(
            cfg,
            policy,
            learner,
            server,
            workers,
            evaluator,
            settings,
            tb_logger,
            RunProgress(cfg.exp_name, max_env_step),
        )
        parts.resume_path = resume_path
        if cfg.get('service'):  # run control / metrics, JSON event log (ding.service)
            from ding.service.hooks import attach_serial_service  # deferred: the run service loads only when asked

            parts.service = attach_serial_service(parts)
            if parts.service is not None:
                closables.append(parts.service.close)
                export_snapshot_gauges(parts.service, 'es', ES_COUNTERS, parts.server.stats.snapshot)
    except BaseException:
        close_all(closables[::-1])
        raise
    parts.closables = closables[::-1]
    return parts


def _stop_workers(workers: ESWorkerProcesses) -> None:
    killed = workers.stop()
    if killed:
        raise RuntimeError(f'es workers {killed} ignored SIGTERM and were killed')


def check_health(parts: ESParts) -> None:
    """Raise when a stop was requested, the server failed or a local worker process exited (they exit only when
    the server goes)."""
    parts.stop.check()
    server = parts.server
    if server.error is not None or not server.is_alive():
        raise RuntimeError(f'the ES server stopped: {server.error!r}') from server.error
    for pid, code in zip(parts.workers.pids(), parts.workers.exit_codes()):
        if code is not None:
            raise RuntimeError(f'es worker process {pid} exited with code {code} (its stderr says why)')


def _update(parts: ESParts, partials: list[Any]) -> None:
    """One ES update through the learner (its hooks run: logging, checkpoints), then the new model published."""
    learner = parts.learner
    stats = parts.server.stats.snapshot()
    learner.log_buffer['scalar'].update({f'es_{name}': stats[name] for name in LOGGED_COUNTERS})
    learner.train(partials, parts.envstep)
    flat, version = parts.policy.flat_parameters_with_version()
    parts.server.publish_model(version, flat)


def run_es_loop(parts: ESParts, max_train_iter: int | None, max_env_step: int | None) -> None:
    """Train until solved, a limit, terminate, a failure or Ctrl-C / SIGTERM (which write an interrupt
    checkpoint); always stop the workers and the server, print the summary line and close everything."""
    learner, server, service, evaluator = parts.learner, parts.server, parts.service, parts.evaluator
    solved, reason = False, 'interrupted'
    with signals_request_stop(parts.stop):
        try:
            learner.call_hook('before_run')
            host, port = server.start()
            learner.info(f'es server on {host}:{port}; more workers: ding es-worker --connect {host}:{port} '
                         f'--token "${RUN_SECRET_ENV}" (set it for this run too)', console=True)  # fmt: skip
            parts.workers.start_all(host, port)
            while True:
                if service is not None and not service.gate(learner.train_iter, parts.envstep):
                    reason = 'terminated'
                    break
                if evaluator.should_eval(learner.train_iter):
                    stop, info = evaluator.eval(learner.save_checkpoint, learner.train_iter, parts.envstep)
                    parts.progress.record_eval(info['eval_episode_return_mean'], parts.envstep, learner.train_iter)
                    if stop:
                        solved, reason = True, 'solved'
                        break
                partials = server.take_batch(BATCH_WAIT)
                if partials is not None:
                    _update(parts, partials)
                parts.progress.update(parts.envstep, learner.train_iter)
                check_health(parts)
                if max_env_step is not None and parts.envstep >= max_env_step:
                    reason = 'max_env_step reached'
                    break
                if max_train_iter is not None and learner.train_iter >= max_train_iter:
                    reason = 'max_train_iter reached'
                    break
            parts.workers.stop()
            learner.call_hook('after_run')
        except KeyboardInterrupt:
            parts.workers.stop()
            save_interrupt_checkpoint(learner)
            raise
        except BaseException as exc:
            reason = f'error: {type(exc).__name__}'
            raise
        finally:
            stats = server.stats.snapshot()
            learner.info('es server: ' + ', '.join(f'{name} {stats[name]:.0f}' for name in ES_COUNTERS))
            finish_run(parts, solved, reason)


def es_pipeline(
    input_cfg: str | tuple[dict, dict],
    seed: int = 0,
    model: torch.nn.Module | None = None,
    max_train_iter: int | None = int(1e10),
    max_env_step: int | None = int(1e10),
    resume: str | None = None,
) -> Any:
    """Train with distributed evolution strategies until ``env.stop_value`` or a limit.

    ``input_cfg`` is a config file path or a ``(main_config, create_config)`` pair; ``resume`` as in
    ``serial_pipeline``. Returns the policy.
    """
    cfg, create_cfg = load_input_config(input_cfg)
    parts = build_es_parts(cfg, create_cfg, seed, model, max_env_step, resume)
    run_es_loop(parts, max_train_iter, max_env_step)
    return parts.policy


__all__ = ['ESParts', 'build_es_parts', 'check_es_config', 'es_pipeline', 'run_es_loop']
