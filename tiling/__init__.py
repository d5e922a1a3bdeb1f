"""pa-kit tiling: the pure-numpy planner that fills the kernel's tiling tensor and sizes its workspace."""

from tiling import abi
from tiling.planner import PagedAttentionPlan, plan_paged_attention
from tiling.rules import validate_shape
from tiling.schedule import Task, enumerate_tasks
from tiling.workspace import WorkspaceSizes

__all__ = [
    "PagedAttentionPlan",
    "Task",
    "WorkspaceSizes",
    "abi",
    "enumerate_tasks",
    "plan_paged_attention",
    "validate_shape",
]
