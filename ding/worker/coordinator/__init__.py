"""Commanders and the parallel coordinator. The serial commander loads with the package; the parallel side
(HTTP master, resource manager, coordinator) is imported on first use of its names."""

from ding.utils.lazy_import import lazy_exports

from .base_serial_commander import BaseSerialCommander, create_serial_commander

_LAZY = {
    'BaseCommander': '.base_parallel_commander',
    'TaskSpace': '.base_parallel_commander',
    'create_parallel_commander': '.base_parallel_commander',
    'get_parallel_commander_cls': '.base_parallel_commander',
    'SoloCommander': '.solo_parallel_commander',
    'NaiveCommander': '.naive_parallel_commander',
    'NaiveResourceManager': '.resource_manager',
    'CommCoordinator': '.comm_coordinator',
    'Coordinator': '.coordinator',
}


__getattr__ = lazy_exports(__name__, _LAZY)
