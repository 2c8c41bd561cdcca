"""How fast an actor picks up new weights, polling vs subscribed, and what signing costs: a real run service on
127.0.0.1 publishing a DQN model's weights, one actor following it in this process.

    python benchmarks/weights_refresh.py [--versions 50] [--poll-seconds 0.5 2.0] [--gap 0.2]

For each mode the learner publishes ``--versions`` versions ``--gap`` s apart; the actor calls ``sync()`` in a
loop (polling: every poll interval, as a collector with ``update_policy_second`` does; subscribed: ``wait()`` on
the stream, then ``sync()``). Prints, per mode, the staleness of each published version: the delay from its
publication until the actor acts with it or a newer one (median / p90 / max), the requests to
``/weights/current`` per loaded version, and the versions skipped. Then the time to sign and to verify a version
(HMAC-SHA256 over run id, version and sha256) next to the sha256 of the payload, which every fetch pays anyway.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from ding.model import DQN  # noqa: E402
from ding.service.http import ServiceServer  # noqa: E402
from ding.service.weights import WeightsClient, WeightsFollower, WeightsStore, serialize_weights  # noqa: E402
from ding.utils.state_dict_codec import sha256_hex  # noqa: E402
from ding.utils.weights_signing import sign_weights, signature_matches, weights_signing_key  # noqa: E402

SECRET = 'benchmark-run-secret-0123456789'
TOKEN = 'benchmark-token-0123'


class Actor:
    """A stand-in policy mode: the state dict the follower loads into."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def state_dict(self) -> dict:
        return {'model': self.model.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state['model'])


def run_mode(mode: str, poll_seconds: float, versions: int, gap: float) -> dict:
    key = weights_signing_key(SECRET)
    store = WeightsStore(run_id='bench', signing_key=key)
    server = ServiceServer(token=TOKEN, weights=store, keepalive_seconds=5.0)
    server.start()
    learner = DQN(obs_shape=4, action_shape=2, encoder_hidden_size_list=[128, 128, 64])
    actor = Actor(DQN(obs_shape=4, action_shape=2, encoder_hidden_size_list=[128, 128, 64]))
    published_at: dict[int, float] = {}
    loads: list[tuple[int, float]] = []
    client = WeightsClient(server.address, token=TOKEN, signing_key=key)
    follower = WeightsFollower(client, actor, subscribe=mode == 'subscribe')
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            if follower.subscription is not None:
                follower.wait(0.5)
            else:
                stop.wait(poll_seconds)
            if follower.sync() and follower.version is not None:
                loads.append((follower.version, time.monotonic()))

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    time.sleep(0.5)  # the stream is up
    for version in range(1, versions + 1):
        with torch.no_grad():
            for p in learner.parameters():
                p.add_(0.01)
        published_at[version] = time.monotonic()
        store.publish({'model': learner.state_dict()}, version)
        time.sleep(gap)
    time.sleep(max(poll_seconds, 0.5) + 0.5)
    stop.set()
    thread.join(5)
    follower.close()
    client.close()
    server.close()
    delays = sorted(
        next(t for v, t in loads if v >= version) - at
        for version, at in published_at.items()
        if any(v >= version for v, _ in loads)
    )
    return {
        'mode': mode if mode == 'subscribe' else f'poll {poll_seconds:g} s',
        'loaded': follower.loads,
        'median_ms': 1e3 * statistics.median(delays),
        'p90_ms': 1e3 * delays[int(0.9 * (len(delays) - 1))],
        'max_ms': 1e3 * delays[-1],
        'requests_per_load': client.fetches / max(1, follower.loads),
        'skipped': follower.skipped_versions,
    }


def signing_costs(n: int = 2000) -> dict:
    model = DQN(obs_shape=4, action_shape=2, encoder_hidden_size_list=[128, 128, 64])
    payload = serialize_weights({'model': model.state_dict()}, 1)
    key = weights_signing_key(SECRET)
    t0 = time.perf_counter()
    for _ in range(n // 20):
        sha = sha256_hex(payload)
    sha_us = 1e6 * (time.perf_counter() - t0) / (n // 20)
    t0 = time.perf_counter()
    for i in range(n):
        signature = sign_weights(key, 'bench', i, sha)
    sign_us = 1e6 * (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        assert signature_matches(key, 'bench', n - 1, sha, signature)
    verify_us = 1e6 * (time.perf_counter() - t0) / n
    return {'payload_kb': len(payload) / 1024, 'sha256_us': sha_us, 'sign_us': sign_us, 'verify_us': verify_us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--versions', type=int, default=50)
    parser.add_argument('--poll-seconds', type=float, nargs='+', default=[0.5, 2.0])
    parser.add_argument('--gap', type=float, default=0.2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [run_mode('poll', p, args.versions, args.gap) for p in args.poll_seconds]
    rows.append(run_mode('subscribe', 0.0, args.versions, args.gap))
    print(f'{args.versions} versions published {args.gap:g} s apart')
    print('| mode | loaded | staleness median / p90 / max (ms) | requests per load | skipped |')
    print('|---|---|---|---|---|')
    for r in rows:
        print(
            f'| {r["mode"]} | {r["loaded"]} | {r["median_ms"]:.1f} / {r["p90_ms"]:.1f} / {r["max_ms"]:.1f} '
            f'| {r["requests_per_load"]:.2f} | {r["skipped"] if r["mode"] == "subscribe" else "-"} |'
        )
    c = signing_costs()
    print(
        f'\npayload {c["payload_kb"]:.0f} KiB: sha256 {c["sha256_us"]:.1f} us, sign {c["sign_us"]:.1f} us, '
        f'verify {c["verify_us"]:.1f} us per version'
    )


if __name__ == '__main__':
    main()
