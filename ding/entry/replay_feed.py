"""``ding replay-feed``: a collector that writes into a replay server (docs/replay.md).

    DING_RUN_SECRET=... ding replay-feed --config cfg.py --replay 127.0.0.1:50051 --weights 127.0.0.1:8700

Collects with the config's collector envs and policy, following the learner's weights (``--weights``: the
``/weights/current`` endpoint of ``ding learner``), and inserts every collected batch through the replay
service. During a replay outage an insert is retried with backoff until the service is back: the batch is kept,
and collection waits.
"""

from __future__ import annotations

import argparse
import sys
import time

from ding.config import ConfigError
from ding.interaction.replay.client import ReplayError
from ding.utils.stop_request import StopRequest, signals_request_stop
from ding.worker.collector.weights_client import WeightsClient, WeightsFollower

from .learner_service import apply_service_args
from .pipeline_parts import build_serial_parts, finish_run, load_input_config


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='ding replay-feed', description='Collect into a replay server (docs/replay.md).')
    p.add_argument('-c', '--config', required=True, help='config file (.py or .yaml)')
    p.add_argument('--replay', required=True, metavar='HOST:PORT', help='the replay server (ding replay-server)')
    p.add_argument('--weights', metavar='HOST:PORT', help="follow this learner's weights (ding learner --weights)")
    p.add_argument('--run-id', help="this collector's directory ./RUN_ID/ (default: the config's exp_name + '_feed')")
    p.add_argument('--sync-seconds', type=float, default=1.0, help='fetch new weights at most this often (default 1.0)')
    p.add_argument('-s', '--seed', type=int, default=0, help='random seed (default 0)')
    p.add_argument('--env-step', type=int, help='stop after this many env steps')
    return p


def replay_feed(
    input_cfg: str | tuple[dict, dict],
    replay: str,
    weights: str | None = None,
    run_id: str | None = None,
    seed: int = 0,
    max_env_step: int | None = None,
    sync_seconds: float = 1.0,
) -> int:
    """Collect and insert until ``max_env_step`` (or Ctrl-C / SIGTERM); returns the env steps collected. New
    weights are fetched at most every ``sync_seconds`` (each fetch costs the learner a publication)."""
    cfg, create_cfg = load_input_config(input_cfg)
    apply_service_args(cfg, replay, None, None, run_id or f'{cfg.get("exp_name", "default_experiment")}_feed')
    cfg.pop('service', None)  # the learner serves the run; a collector only writes
    parts = build_serial_parts(cfg, create_cfg, seed, None, None, True, max_env_step, with_buffer=True)
    collector, buffer, commander = parts.collector, parts.buffer, parts.commander
    follower = None if weights is None else WeightsFollower(WeightsClient(weights), parts.policy.collect_mode)
    reason = 'interrupted'
    last_sync = -float('inf')
    stop = StopRequest()  # Ctrl-C / SIGTERM: acted on between collects (a second one at once, e.g. in an outage)
    try:
        with signals_request_stop(stop):
            while max_env_step is None or collector.envstep < max_env_step:
                stop.check()
                if follower is not None and time.monotonic() - last_sync >= sync_seconds:
                    last_sync = time.monotonic()
                    if follower.sync():
                        parts.learner.info(f'replay feed: weights version {follower.version}')
                version = -1 if follower is None or follower.version is None else follower.version
                data = collector.collect(train_iter=version, policy_kwargs=commander.step())
                buffer.push(data, cur_collector_envstep=collector.envstep)
        reason = 'max_env_step reached'
    finally:
        if follower is not None:
            follower.client.close()
        finish_run(parts, False, reason)
    return collector.envstep


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (args.env_step is not None and args.env_step < 1) or not args.sync_seconds >= 0:
        print('ding replay-feed: error: --env-step must be >= 1 and --sync-seconds >= 0', file=sys.stderr)
        return 2
    try:
        replay_feed(args.config, args.replay, args.weights, args.run_id, args.seed, args.env_step, args.sync_seconds)
    except ConfigError as exc:
        print(f'ding replay-feed: error: {exc}', file=sys.stderr)
        return 2
    except ReplayError as exc:  # a wrong token or a malformed batch: no retry can cure it
        print(f'ding replay-feed: error: {exc}', file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


__all__ = ['replay_feed', 'main']
