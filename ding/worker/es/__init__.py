"""Distributed evolution strategies: the learner's ES server (protocol, partial buffer, downloads), the worker
process, the noise table and rollouts (``ding -m es``; docs/es.md).

Names resolve lazily: ``import ding.worker.es`` loads neither torch nor msgpack.
"""

from ding.utils.lazy_import import lazy_exports

_EXPORTS = {
    'ServerConnection': '.client',
    'ES_SERVER_BOUNDS': '.config',
    'ES_SERVER_DEFAULTS': '.config',
    'ESServerSettings': '.config',
    'DownloadTable': '.downloads',
    'ModelImage': '.downloads',
    'PartialBuffer': '.partial_buffer',
    'UpdateThread': '.partial_buffer',
    'FrameCodec': '.protocol',
    'ProtocolError': '.protocol',
    'ESRollout': '.rollout',
    'ESServer': '.server',
    'ES_COUNTERS': '.stats',
    'ESServerStats': '.stats',
    'ESWorkerProcesses': '.processes',
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
