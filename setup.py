from setuptools import find_packages, setup

setup(
    name='ding',
    version='0.1.0',
    description='A lean reinforcement-learning framework with a DI-engine style learner, serial and parallel pipelines',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['ding', 'ding.*', 'dizoo', 'dizoo.*']),
    python_requires='>=3.11',
    install_requires=[
        'torch>=2.1',
        'numpy>=1.24',
        'gymnasium>=1.0',
        'flask>=3.0',
        'requests>=2.31',
        'easydict>=1.10',
        'tensorboardX>=2.6',
        'pyyaml>=6.0',
        'safetensors>=0.4',
        'tqdm>=4.66',
        'prometheus-client>=0.20',
        'fsspec>=2023.6',
    ],
    extras_require={
        # saving replays (enable_save_replay): moviepy writes the videos, pygame renders the classic-control envs
        'video': ['moviepy>=1.0.3', 'pygame>=2.1'],
        # the async pipeline's C++ vector envs (CartPole, Atari, MuJoCo; ding.envs.vector backend='envpool')
        'envpool': ['envpool>=1.2'],
        # Atari games through gymnasium (ale-py ships the ROMs; OpenCV resizes the frames)
        'atari': ['ale-py>=0.10', 'opencv-python-headless>=4.8'],
        # MuJoCo envs through gymnasium (Hopper-v5, HalfCheetah-v5, ...; the generic type='gymnasium' env)
        'mujoco': ['mujoco>=3.0'],
        # SEED actors on other hosts (policy.seed.listen, `ding seed-actor`): ZeroMQ messages over TCP
        'remote': ['pyzmq>=25'],
        # the ES pipeline's worker protocol (ding -m es, ding es-worker): msgpack frame headers
        'es': ['msgpack>=1.0'],
        # `ding plot`: learning curves of runs drawn with matplotlib
        'plot': ['matplotlib>=3.5'],
        # OpenTelemetry traces of a run (service.tracing): the SDK, and its OTLP/HTTP exporter for a collector
        'otel': ['opentelemetry-sdk>=1.20', 'opentelemetry-exporter-otlp-proto-http>=1.20'],
        # checkpoints in object storage (policy.learn.learner.checkpoint.ckpt_uri): S3, Google Cloud Storage, zstd shards
        's3': ['s3fs>=2024.6'],
        'gcs': ['gcsfs>=2024.6'],
        'zstd': ['zstandard>=0.22'],
        # the test suite: pytest, the lint / type / layer checks `make test` runs first, and the video extra's
        # libraries so the replay tests run instead of skipping, and the envpool, atari, mujoco, plot and otel
        # extras' (ding.envs, ding plot, service.tracing)
        'test': [
            'pytest>=8.0',
            'pytest-timeout>=2.3',
            'ruff>=0.15',
            'mypy>=1.10',
            'import-linter>=2.0',
            'moviepy>=1.0.3',
            'pygame>=2.1',
            'envpool>=1.2',
            'ale-py>=0.10',
            'opencv-python-headless>=4.8',
            'mujoco>=3.0',
            'pyzmq>=25',
            'msgpack>=1.0',
            'matplotlib>=3.5',
            'opentelemetry-sdk>=1.20',
            'opentelemetry-exporter-otlp-proto-http>=1.20',
            's3fs>=2024.6',
            'zstandard>=0.22',
            'moto[server]>=5.0',
        ],
    },
    entry_points={
        'console_scripts': ['ding=ding.entry.cli:run'],
        # Components `ding --query-registry` lists (ding.utils.builtin): dizoo's environments register on import.
        'ding.components': [
            'cartpole = dizoo.classic_control.cartpole.envs.cartpole_env',
            'pendulum = dizoo.classic_control.pendulum.envs.pendulum_env',
        ],
    },
)
