"""pa-kit launcher: paged-attention decode on the mock device, the simulation or an Ascend NPU.

``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` is set before torch is imported: on a machine where torch_npu is
installed but CANN is not, torch's backend auto-load would otherwise make ``import torch`` itself fail,
unrecoverably.  The npu backend imports torch_npu explicitly when it is used.
"""

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from launcher.errors import DefaultOutputReusedWarning, KernelContractError
from launcher.functional import paged_attention
from launcher.merge import merge_by_lse
from launcher.mla import MlaPagedAttentionRunner, mla_paged_attention
from launcher.runner import PagedAttentionRunner

__all__ = ["DefaultOutputReusedWarning", "KernelContractError", "MlaPagedAttentionRunner", "PagedAttentionRunner",
           "merge_by_lse", "mla_paged_attention", "paged_attention"]
