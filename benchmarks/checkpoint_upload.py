"""Checkpoint upload time and bytes, with and without zstd: real checkpoints (model, target model and Adam state of
``ding.model.DQN``, written by ``ding.utils.checkpoint.save_checkpoint``) stored under a ``ckpt_uri`` by
``ding.utils.remote_checkpoint.RemoteCheckpoints`` (shards, verification, MANIFEST.json, latest) and downloaded
back, on two stores: moto's S3 server on 127.0.0.1 (an S3-compatible HTTP server; no network latency, so the
times are the client's and the server's work, not a real bucket's) and a local directory.

    python benchmarks/checkpoint_upload.py [--rounds 3] [--sizes small,atari] [--stores s3,local]

Sizes: ``small`` (a CartPole DQN, MLP encoder 128-128-64: 34k parameters) and ``atari`` (the Atari DQN, conv
encoder 32-64-512 on 4x84x84 frames: 3.2M parameters); each checkpoint holds the model, the target model and Adam's
two moments (4x the parameters, float32). After the first round the optimizer state is not
all zeros (a few Adam steps are taken), as in a real run. Prints one row per size x store x compression: data
bytes, stored bytes (ratio), median upload and download seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ding.model import DQN  # noqa: E402
from ding.utils.checkpoint import save_checkpoint  # noqa: E402
from ding.utils.checkpoint_settings import CheckpointSettings  # noqa: E402
from ding.utils.remote_checkpoint import RemoteCheckpoints  # noqa: E402

MODELS = {
    'small': dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[128, 128, 64]),
    'atari': dict(obs_shape=[4, 84, 84], action_shape=6, encoder_hidden_size_list=[32, 64, 512]),
}


def checkpoint_state(size: str) -> dict:
    torch.manual_seed(0)
    model = DQN(**MODELS[size])
    target = DQN(**MODELS[size])
    target.load_state_dict(model.state_dict())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    obs_shape = MODELS[size]['obs_shape']
    shape = [8] + (list(obs_shape) if isinstance(obs_shape, list) else [obs_shape])
    for _ in range(3):  # a few steps: Adam's moments are not all zeros
        loss = model(torch.randn(*shape))['logit'].pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {
        'model': model.state_dict(),
        'target_model': target.state_dict(),
        'optimizer': optimizer.state_dict(),
        'last_iter': 1,
    }


def start_moto() -> tuple[object, str]:
    from moto.server import ThreadedMotoServer

    os.environ.update(
        AWS_ACCESS_KEY_ID='bench', AWS_SECRET_ACCESS_KEY='bench', AWS_DEFAULT_REGION='us-east-1',
        AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )  # fmt: skip
    server = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f'http://{host}:{port}'
    os.environ['AWS_ENDPOINT_URL'] = endpoint
    import boto3

    boto3.client('s3', endpoint_url=endpoint).create_bucket(Bucket='bench')
    return server, endpoint


def measure(uri: str, compression: str | None, data_path: str, rounds: int, work: str) -> dict:
    settings = CheckpointSettings(ckpt_uri=uri, compression=compression, keep_n=1)
    ups, downs, stored = [], [], 0
    for r in range(rounds):
        remote = RemoteCheckpoints(settings)
        t0 = time.perf_counter()
        entry = remote.upload(data_path, {'name': 'iteration_1', 'iteration': 1})
        remote.commit(entry, {})
        ups.append(time.perf_counter() - t0)
        stored = entry['stored_bytes']
        t0 = time.perf_counter()
        remote.download(entry, os.path.join(work, f'down_{r}'))
        downs.append(time.perf_counter() - t0)
    return {'stored': stored, 'up': statistics.median(ups), 'down': statistics.median(downs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--sizes', default='small,atari')
    parser.add_argument('--stores', default='s3,local')
    args = parser.parse_args()
    torch.set_num_threads(1)
    server = None
    stores = args.stores.split(',')
    if 's3' in stores:
        server, _ = start_moto()
    try:
        with tempfile.TemporaryDirectory() as work:
            print('| size | store | compression | data bytes | stored bytes | ratio | upload s | download s |')
            print('|---|---|---|---|---|---|---|---|')
            for size in args.sizes.split(','):
                data_path = save_checkpoint(os.path.join(work, size, 'iteration_1'), checkpoint_state(size))
                raw = os.path.getsize(data_path)
                for store in stores:
                    for compression in (None, 'zstd'):
                        where = f'{store}-{size}-{compression}'
                        uri = f's3://bench/{where}' if store == 's3' else os.path.join(work, 'store', where)
                        m = measure(uri, compression, data_path, args.rounds, os.path.join(work, where))
                        print(
                            f'| {size} | {store} | {compression or "none"} | {raw} | {m["stored"]} | '
                            f'{m["stored"] / raw:.3f} | {m["up"]:.3f} | {m["down"]:.3f} |',
                            flush=True,
                        )
    finally:
        if server is not None:
            server.stop()


if __name__ == '__main__':
    main()
