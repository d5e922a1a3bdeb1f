"""The decode features beyond one-token attention: several query tokens, a sliding window, sinks and the lse.

A runner fixes its features for its life (they size the output, the lse buffer and the workspace, and are
words of every plan), so they are validated once, when it is built, before any library is loaded, and then
checked against what the backend's library says it executes (``pa_supported_features``): a kernel that does
not execute a feature would ignore the tiling word that asks for it and return plain attention, silently.
The rules on values live in :mod:`tiling.rules`; this module adds the tensor checks of ``sinks`` and the
refusal that names the backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from launcher.library import KernelLibrary
from tiling import abi, rules

#: Element types of ``sinks`` by the planner's ``sinks_dtype`` names.
SINKS_DTYPE_NAMES: dict[torch.dtype, str] = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
#: The torch dtype of each ``sinks_dtype`` name (the inverse of :data:`SINKS_DTYPE_NAMES`).
SINKS_TORCH_DTYPES: dict[str, torch.dtype] = {name: dtype for dtype, name in SINKS_DTYPE_NAMES.items()}
#: How each feature is asked for, in the user's words.
FEATURE_ARGUMENTS: dict[abi.Feature, str] = {
    abi.Feature.MULTI_TOKEN: "a query of q_len > 1 tokens",
    abi.Feature.WINDOW: "window_left",
    abi.Feature.SINKS: "sinks",
    abi.Feature.LSE: "return_lse",
    abi.Feature.MLA: "MLA (mla_paged_attention, MlaPagedAttentionRunner)",
}


@dataclass(frozen=True)
class DecodeFeatures:
    """A runner's decode features, validated: ``q_len`` query tokens per sequence, ``window_left`` (-1: none),
    the sinks' element type (None: no sinks), whether each launch writes the lse, MLA's rope width (0: not MLA)
    and how the NPU kernel rescales an MLA task's output accumulator ('plain' or 'pow2')."""

    q_len: int = 1
    window_left: int = -1
    sinks_dtype: str | None = None
    return_lse: bool = False
    rope_dim: int = 0
    mla_rescale: str = "plain"

    @property
    def bits(self) -> int:
        """The :class:`tiling.abi.Feature` bits a library must execute for these features."""
        return rules.requested_features(q_len=self.q_len, window_left=self.window_left,
                                        sinks_dtype=self.sinks_dtype, return_lse=self.return_lse,
                                        rope_dim=self.rope_dim)

    @property
    def sinks_torch_dtype(self) -> torch.dtype | None:
        return None if self.sinks_dtype is None else SINKS_TORCH_DTYPES[self.sinks_dtype]

    def plan_options(self) -> dict[str, Any]:
        """The planner's keywords for these features."""
        return {"q_len": self.q_len, "window_left": self.window_left, "sinks_dtype": self.sinks_dtype,
                "return_lse": self.return_lse, "rope_dim": self.rope_dim, "mla_rescale": self.mla_rescale}


def sinks_dtype_name(dtype: object) -> str | None:
    """The planner's name for a sinks element type given as a torch dtype (or already as a name); None stays
    None.  Anything else is the TypeError of :func:`tiling.rules.validate_sinks_dtype`."""
    if isinstance(dtype, torch.dtype):
        name = SINKS_DTYPE_NAMES.get(dtype)
        if name is None:
            rules.validate_sinks_dtype(str(dtype))  # raises, naming the dtype given
        return name
    rules.validate_sinks_dtype(dtype)
    return None if dtype is None else str(dtype)


def check_sinks(sinks: object, *, num_heads: int, device: torch.device) -> torch.Tensor:
    """``sinks``: a contiguous ``[num_heads]`` tensor of float32, float16 or bfloat16 on ``device``."""
    if not isinstance(sinks, torch.Tensor):
        raise TypeError(f"sinks must be a torch.Tensor [num_heads] (one logit per query head) or None, got "
                        f"{type(sinks).__name__}")
    if tuple(sinks.shape) != (num_heads,):
        raise ValueError(f"sinks must be 1-D [num_heads] = ({num_heads},) (one logit per query head), got shape "
                         f"{tuple(sinks.shape)}")
    sinks_dtype_name(sinks.dtype)
    if sinks.device != device:
        raise ValueError(f"sinks must be on the query's device {device}, got {sinks.device}")
    if not sinks.is_contiguous():
        raise ValueError(f"sinks must be contiguous, got stride {tuple(sinks.stride())}; call .contiguous() first")
    return sinks


def decode_features(*, q_len: object = 1, window_left: object = -1, sinks_dtype: object = None,
                    return_lse: object = False, rope_dim: object = 0, mla_rescale: object = "plain") -> DecodeFeatures:
    """Validate the feature options (the rules of :mod:`tiling.rules`, the planner's own)."""
    q = rules.validate_q_len(q_len)
    window = rules.validate_window_left(window_left)
    name = sinks_dtype_name(sinks_dtype)
    rules.validate_option("return_lse", return_lse, (True, False))
    rope = rules.validate_rope_dim(rope_dim)
    rules.validate_mla_rescale(mla_rescale, rope)
    return DecodeFeatures(q_len=q, window_left=window, sinks_dtype=name, return_lse=bool(return_lse),
                          rope_dim=rope, mla_rescale=str(mla_rescale))


def check_supported(features: DecodeFeatures, library: KernelLibrary, backend: str) -> None:
    """Refuse a feature the backend's library does not execute, naming the backend, the feature and what to
    use instead: a kernel would otherwise ignore the tiling word that asks for it and return plain attention."""
    missing = features.bits & ~library.supported_features
    if not missing:
        return
    names = ", ".join(FEATURE_ARGUMENTS[feature] for feature in abi.Feature if missing & feature)
    if library.external:
        reason = "an external ATB-ABI kernel executes none of the decode features"
        advice = "use pa-kit's own kernel, or backend='mock' with CPU tensors"
    elif backend in ("sim", "npu"):
        reason = "the NPU kernel follows in a later issue"
        advice = "use backend='mock'" + (" with CPU tensors" if backend == "npu" else "")
    else:
        reason = f"{library.path.name} reports pa_supported_features() = {library.supported_features:#x}"
        advice = "rebuild it with `bash compile.sh`" if backend == "mock" else "use backend='mock'"
    raise ValueError(f"the {backend} backend's kernel does not execute {names} yet ({reason}): {advice}")
