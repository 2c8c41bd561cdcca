from .distributional_q import C51DQN, QRDQN
from .impala_vac import IMPALAVAC
from .q_learning import DQN, DRQN
from .qac import ContinuousQAC
from .vac import VAC
