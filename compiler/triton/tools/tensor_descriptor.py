"""`triton.tools.tensor_descriptor.TensorDescriptor`: the host-side description of a tensor tile
(base tensor, shape, strides, block shape) that Triton passes to kernels using tensor descriptors.
Host side only: whether a kernel may take one depends on the tile language's support for
descriptors."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class TensorDescriptor:
    base: object
    shape: list
    strides: list
    block_shape: list
    padding: str = "zero"

    def __post_init__(self):
        rank = len(self.shape)
        if len(self.strides) != rank or len(self.block_shape) != rank:
            raise ValueError(f"TensorDescriptor: shape {list(self.shape)}, strides {list(self.strides)} and "
                             f"block_shape {list(self.block_shape)} must have the same rank")
        if self.strides and self.strides[-1] != 1:
            raise ValueError(f"TensorDescriptor: the last dimension must be contiguous (stride 1), got "
                             f"strides {list(self.strides)}")
        if self.padding not in ("zero", "nan"):
            raise ValueError(f"TensorDescriptor: padding must be 'zero' or 'nan', got {self.padding!r}")

    @staticmethod
    def from_tensor(tensor, block_shape, padding="zero"):
        return TensorDescriptor(tensor, list(tensor.shape), list(tensor.stride()), list(block_shape), padding)
