"""Parallel-mode comm collectors: the collector process's side of the coordinator protocol (imports flask)."""

from .base_comm_collector import BaseCommCollector, create_comm_collector
from .collector_slave import CollectorSlave
from .flask_fs_collector import FlaskFileSystemCollector
from .utils import PolicyFileWatcher

__all__ = [
    'BaseCommCollector',
    'create_comm_collector',
    'PolicyFileWatcher',
    'FlaskFileSystemCollector',
    'CollectorSlave',
]
