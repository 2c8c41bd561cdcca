"""SEED-style central inference on one host: actor processes step envs and send observations through shared
memory; the learner's inference server batches them, acts with the newest model and assembles trajectories.

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
    'ActorProcesses': '.processes',
    'InferenceServer': '.server',
    'InferenceStats': '.stats',
    'ActorClient': '.transport',
    'SlotLayout': '.transport',
    'TransportError': '.transport',
    'new_secret': '.transport',
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
