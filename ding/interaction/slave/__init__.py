"""Slave side: Slave server and the exceptions its hooks raise."""

from .action import ConnectionRefuse, DisconnectionRefuse, TaskFail, TaskRefuse
from .callback_slave import CallbackSlave
from .slave import Slave
