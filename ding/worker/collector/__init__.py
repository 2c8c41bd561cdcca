"""Collectors and the evaluator. The serial ones load with the package; the parallel collector (which brings
the file transport and checkpoint code) is imported on first use of its names."""

from ding.utils.lazy_import import lazy_exports

from .base_serial_collector import (
    BaseSerialCollector,
    ISerialCollector,
    create_serial_collector,
    get_serial_collector_cls,
)
from .episode_serial_collector import EpisodeSerialCollector
from .interaction_serial_evaluator import InteractionSerialEvaluator, create_serial_evaluator, get_serial_evaluator_cls
from .sample_serial_collector import SampleSerialCollector

_LAZY = {
    'BaseParallelCollector': '.base_parallel_collector',
    'ZerglingParallelCollector': '.zergling_parallel_collector',
    'create_parallel_collector': '.parallel_collector_factory',
    'get_parallel_collector_cls': '.parallel_collector_factory',
}


__getattr__ = lazy_exports(__name__, _LAZY)
