from .optim import Adam, avoid_dynamo_import
from .threads import configure_torch_threads
