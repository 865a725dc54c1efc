"""Device memory outside the tensors a model allocates: one set of figures for training and serving.

CUDA_CONTEXT_BYTES: a CUDA 12 context with its kernel images and library handles takes 300-700 MiB
(nvidia-smi against torch.cuda.memory_reserved for an idle PyTorch or TensorRT process on A100/H100);
we take 512 MiB. LIBRARY_WORKSPACE_BYTES: cuBLAS/cuBLASLt and cuDNN workspaces, sampling buffers and
CUDA-graph pools; we take 256 MiB. NCCL_BYTES_PER_COMMUNICATOR: NCCL keeps NCCL_BUFFSIZE (4 MiB) per
channel per peer connection over 8-32 channels, plus staging buffers; we take 256 MiB per communicator
in use.
"""

from __future__ import annotations

CUDA_CONTEXT_BYTES = 512 * 2**20
LIBRARY_WORKSPACE_BYTES = 256 * 2**20
NCCL_BYTES_PER_COMMUNICATOR = 256 * 2**20

PROCESS_BYTES = CUDA_CONTEXT_BYTES + LIBRARY_WORKSPACE_BYTES
"""What every GPU process holds before its first tensor: context plus library workspaces."""
