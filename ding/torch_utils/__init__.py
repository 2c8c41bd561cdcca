from .optim import Adam
from .threads import configure_torch_threads
