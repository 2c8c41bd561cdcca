from .impala_vac import IMPALAVAC
from .q_learning import DQN
from .vac import VAC
