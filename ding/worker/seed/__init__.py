"""SEED-style central inference: actor processes step envs and send observations through shared memory (one
host) or ZeroMQ (other hosts, ``remote``); the learner's inference server batches them, acts with the newest
model and assembles trajectories.

Names resolve lazily: an actor process (``actor_main``) imports this package without torch.
"""

from ding.utils.lazy_import import lazy_exports

_EXPORTS = {
    'BatchActing': '.acting',
    'QNetActing': '.acting',
    'TransitionAssembler': '.assembly',
    'TransitionChunk': '.assembly',
    'UnrollAssembler': '.assembly',
    'SEED_BOUNDS': '.config',
    'SEED_DEFAULTS': '.config',
    'SeedSettings': '.config',
    'ActorLink': '.links',
    'ShmLink': '.links',
    'ActorProcesses': '.processes',
    'RemoteActorClient': '.remote',
    'RemoteHub': '.remote',
    'InferenceServer': '.server',
    'follow_run_control': '.server',
    'InferenceStats': '.stats',
    'ActorClient': '.transport',
    'SlotLayout': '.transport',
    'TransportError': '.transport',
    'new_secret': '.transport',
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
