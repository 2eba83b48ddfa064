"""litbert's encoder: one bidirectional Transformer with selectable position scheme, norm and activation."""

from encoders.config import PRESETS, EncoderConfig
from encoders.heads import MaskedLMHead, SequenceClassificationHead, TokenClassificationHead
from encoders.kernels import Kernels
from encoders.model import Encoder, EncoderOutput
from encoders.positions import POSITIONS

__all__ = [
    "POSITIONS",
    "PRESETS",
    "Encoder",
    "EncoderConfig",
    "EncoderOutput",
    "Kernels",
    "MaskedLMHead",
    "SequenceClassificationHead",
    "TokenClassificationHead",
]
