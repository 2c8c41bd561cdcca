from .base_buffer import IBuffer, create_buffer, get_buffer_cls
from .naive_buffer import NaiveReplayBuffer
from .advanced_buffer import AdvancedReplayBuffer
from .utils import SegmentTree, SumSegmentTree, MinSegmentTree, ThruputController
