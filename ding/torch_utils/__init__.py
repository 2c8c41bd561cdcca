from .optim import Adam
from .threads import configure_torch_threads
from .weight_loader import WeightLoader
