from .layers import MLP, fc_block, build_activation, build_normalization
from .module_call import fast_call
from .encoder import FCEncoder, ConvEncoder, build_encoder
from .head import DiscreteHead, DuelingHead, RegressionHead, ReparameterizationHead
from .utils import create_model
