from .encoder import NATURE_CNN_SIZES, ConvEncoder, FCEncoder, build_encoder
from .head import DiscreteHead, DuelingHead, RegressionHead, ReparameterizationHead
from .layers import MLP, build_activation, build_normalization, fc_block
from .utils import create_model
