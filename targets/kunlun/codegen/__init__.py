"""Kunlun XPU C++ generation: the dialect table, the DMA lowering, 16-lane SIMD, the 32-bit index
proof and the renderer with its LM budget check."""
