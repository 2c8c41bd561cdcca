"""Master side: Master server, connections to slaves and tasks."""

from .connection import SlaveConnectionProxy, SlaveNotAuthenticated
from .master import Master
from .task import Task, TaskStatus
