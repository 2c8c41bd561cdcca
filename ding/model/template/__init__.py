from .q_learning import DQN
from .vac import VAC
