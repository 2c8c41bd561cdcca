"""``ding learner``: a learner as a standalone service, fed by a replay server (docs/replay.md).

    DING_RUN_SECRET=... ding learner --config cfg.py --replay 127.0.0.1:50051 --weights 127.0.0.1:8700 \\
        --run-id cartpole_dqn --ckpt-uri s3://bucket/runs

It samples from the replay service (``--replay``), trains, sends priorities back, evaluates every
``eval_freq`` iterations (stopping at ``env.stop_value``) and serves its weights, metrics and run control on
``--weights`` (the run service: ``/weights/current``, ``/metrics``, ``/run/*``). While the replay service is
away the learner pauses (no optimizer step), keeps its heartbeat and resumes when the service answers again.
"""

from __future__ import annotations

import argparse
import sys
from time import perf_counter
from typing import Any

from easydict import EasyDict

from ding.config import ConfigError
from ding.interaction.replay.client import ReplayError
from ding.utils.host_port import parse_host_port
from ding.utils.stop_request import StopRequest, signals_request_stop

from .pipeline_parts import build_serial_parts, finish_run, load_input_config, save_interrupt_checkpoint
from .rank_group import stop_reason


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='ding learner', description='A learner fed by a replay server (docs/replay.md).')
    p.add_argument('-c', '--config', required=True, help='config file (.py or .yaml), validated as for ding -m serial')
    p.add_argument('--replay', required=True, metavar='HOST:PORT', help='the replay server (ding replay-server)')
    p.add_argument(
        '--weights', metavar='HOST:PORT', help='serve weights, metrics and run control here (the run service)'
    )
    p.add_argument('--ckpt-uri', help='where checkpoints go (policy.learn.learner.checkpoint.ckpt_uri)')
    p.add_argument('--run-id', help="names the run: its directory ./RUN_ID/ (default: the config's exp_name)")
    p.add_argument('-s', '--seed', type=int, default=0, help='random seed (default 0)')
    p.add_argument('--train-iter', type=int, help='stop after this many train iterations')
    return p


def apply_service_args(cfg: EasyDict, replay: str, weights: str | None, ckpt_uri: Any, run_id: str | None) -> None:
    """Write the command line's choices into ``cfg``; ``ConfigError`` naming the flag for a bad value."""
    try:
        parse_host_port(replay, '--replay')
        address = parse_host_port(weights, '--weights') if weights is not None else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if ckpt_uri is not None and (not isinstance(ckpt_uri, str) or not ckpt_uri.strip()):
        raise ConfigError(f'--ckpt-uri must be a non-empty string, got {ckpt_uri!r}')
    if run_id is not None and (not run_id or '/' in run_id or run_id.startswith('.')):
        raise ConfigError(f'--run-id must be a plain directory name, got {run_id!r}')
    policy = cfg.setdefault('policy', EasyDict())
    other = policy.setdefault('other', EasyDict())
    other.setdefault('replay_buffer', EasyDict())['replay_address'] = replay
    if address is not None:
        service = dict(cfg.get('service') or {})
        service.update(enable=True, host=address[0], port=address[1])
        cfg.service = EasyDict(service)
    if ckpt_uri is not None:
        learner = policy.setdefault('learn', EasyDict()).setdefault('learner', EasyDict())
        learner.setdefault('checkpoint', EasyDict())['ckpt_uri'] = ckpt_uri
    if run_id is not None:
        cfg.exp_name = run_id


def learner_service(
    input_cfg: str | tuple[dict, dict],
    replay: str,
    weights: str | None = None,
    ckpt_uri: str | None = None,
    run_id: str | None = None,
    seed: int = 0,
    max_train_iter: int | None = None,
) -> bool:
    """Train from the replay server at ``replay`` until the stop value (True), ``max_train_iter`` or a
    terminate request (False). The config is validated as for ``ding -m serial`` before anything starts."""
    cfg, create_cfg = load_input_config(input_cfg)
    apply_service_args(cfg, replay, weights, ckpt_uri, run_id)
    parts = build_serial_parts(cfg, create_cfg, seed, None, None, True, None, with_buffer=True)
    learner, buffer = parts.learner, parts.buffer
    learner.info(f'learner service: replay {buffer.address}, weights {weights or "not served"}', console=True)
    stop = StopRequest()
    with signals_request_stop(stop):  # Ctrl-C / SIGTERM: acted on between iterations (an interrupt checkpoint)
        return train_from_replay(parts, stop, max_train_iter)


def train_from_replay(parts: Any, stop: StopRequest, max_train_iter: int | None) -> bool:
    """The learner service's loop over built ``parts`` (their buffer a ``RemoteReplayBuffer``); always prints the
    summary line and closes every component."""
    learner, evaluator, buffer, service = parts.learner, parts.evaluator, parts.buffer, parts.service
    learn_cfg = parts.cfg.policy.learn
    use_priority = parts.cfg.policy.get('priority', False)
    solved, reason = False, 'interrupted'
    started = perf_counter()
    try:
        learner.call_hook('before_run')
        while True:
            stop.check()
            # pause / tune / terminate, and the heartbeat, also while the replay service is away
            if service is not None and not service.gate(learner.train_iter, parts.envstep):
                reason = 'terminated'
                break
            if evaluator.should_eval(learner.train_iter):
                solved, eval_info = evaluator.eval(learner.save_checkpoint, learner.train_iter, parts.envstep)
                parts.progress.record_eval(eval_info['eval_episode_return_mean'], parts.envstep, learner.train_iter)
                if solved:
                    reason = 'solved'
                    break
            batch = buffer.sample(learn_cfg.batch_size, learner.train_iter)
            if batch is None:  # no batch within sample_wait: the optimizer waits (degraded or filling up)
                if service is not None and service.weights is not None and service.weights.wanted:
                    service.publish_weights(learner)  # collectors asking for weights must not wait on training
                continue
            learner.train(batch, parts.envstep)
            if use_priority:
                buffer.update(learner.priority_info)
            limit = stop_reason(parts.envstep, learner.train_iter, None, max_train_iter)
            if limit is not None:
                reason = limit
                break
        learner.call_hook('after_run')
    except KeyboardInterrupt:
        save_interrupt_checkpoint(learner)
        raise
    finally:
        elapsed = perf_counter() - started
        learner.info(
            f'learner service: waited {buffer.wait_seconds:.1f} s of {elapsed:.1f} s for batches', console=True
        )
        finish_run(parts, solved, reason)
    return solved


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.train_iter is not None and args.train_iter < 1:
        print('ding learner: error: --train-iter must be >= 1', file=sys.stderr)
        return 2
    try:
        learner_service(args.config, args.replay, args.weights, args.ckpt_uri, args.run_id, args.seed, args.train_iter)
    except ConfigError as exc:
        print(f'ding learner: error: {exc}', file=sys.stderr)
        return 2
    except ReplayError as exc:  # a wrong token or a malformed batch: no retry can cure it
        print(f'ding learner: error: {exc}', file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


__all__ = ['learner_service', 'train_from_replay', 'apply_service_args', 'main']
