"""Master side: Master server, connections to slaves and tasks."""

from .connection import SlaveConnectionProxy
from .master import Master
from .task import Task, TaskStatus
