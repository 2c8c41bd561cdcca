from .advanced_buffer import AdvancedReplayBuffer
from .base_buffer import IBuffer, create_buffer, get_buffer_cls
from .naive_buffer import NaiveReplayBuffer
from .utils import MinSegmentTree, SegmentTree, SumSegmentTree, ThruputController
