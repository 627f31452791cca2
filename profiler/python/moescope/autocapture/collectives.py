"""Collectives of ``torch.distributed`` without code changes.

Preferred: the C++ capture (``torch_capture.py``), which sees every collective c10d runs,
including those PyTorch issues from C++ (DDP's gradient buckets). When that library is missing
or was built for another torch, the collective functions of the Python API are wrapped instead:
those a program (or FSDP2, or torchtitan) calls from Python are recorded, DDP's buckets are
not, and the trace says so. Collectives on NCCL groups are left to the shim's NCCL interposer,
which has their GPU times.

Each op is recorded as ``moescope_comm_op``: kind, bytes this rank sends, dtype (torch
ScalarType + 100), the group (a stable id, this rank's index in it, its size), the root or peer
as a group index, and for ``all_to_all_single`` the bytes sent to each peer, so the analysis can
draw the all-to-all matrix. Times are the call on the host (enqueue to return).
"""

import ctypes
import functools
import zlib

from .. import _recorder
from . import note, warn

# torch.dtype -> c10::ScalarType number (c10/core/ScalarType.h).
_SCALAR_TYPES = {
    "uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6,
    "float64": 7, "complex64": 9, "complex128": 10, "bool": 11, "bfloat16": 15,
}


def install(config):
    """Starts the C++ capture, or wraps the Python API; returns what to keep alive."""
    try:
        from . import torch_capture
    except ImportError as error:
        started, reason = False, f"no C++ capture module ({error})"
    else:
        started, reason = torch_capture.start(collectives=True, ops=config.torch_ops)
    if started:
        note("collectives from c10d (C++ capture)")
        return torch_capture
    if config.torch_ops:
        warn(f"--torch-ops needs the C++ capture, which is not available: {reason}")
    # In the trace and so in the report's capture gaps ("not captured"), and once on stderr.
    gap = (f"C++ collective capture unavailable ({reason}): collectives PyTorch issues from C++ "
           "(DDP gradient buckets) are not captured, those called from Python are")
    note(gap)
    warn(gap)
    return PythonCollectives().install()


def tensor_bytes(tensor):
    return tensor.numel() * tensor.element_size()


def dtype_code(tensor):
    return _SCALAR_TYPES.get(str(tensor.dtype).replace("torch.", ""), 255) + 100


class PythonCollectives:
    """Wraps torch.distributed's collective functions; one comm op per call."""

    # name -> (kind, the argument that holds what this rank sends, root/peer argument or None)
    FUNCTIONS = {
        "all_reduce": ("all_reduce", "tensor", None),
        "all_gather": ("all_gather", "tensor", None),
        "all_gather_into_tensor": ("all_gather", "input_tensor", None),
        "reduce_scatter_tensor": ("reduce_scatter", "input", None),
        "reduce_scatter": ("reduce_scatter", "input_list", None),
        "all_to_all_single": ("all_to_all", "input", None),
        "all_to_all": ("all_to_all", "input_tensor_list", None),
        "broadcast": ("broadcast", "tensor", "src"),
        "reduce": ("reduce", "tensor", "dst"),
        "gather": ("gather", "tensor", "dst"),
        "scatter": ("scatter", "scatter_list", "src"),
        "send": ("send", "tensor", "dst"),
        "recv": ("recv", "tensor", "src"),
        "barrier": ("barrier", None, None),
    }

    def __init__(self):
        self.sequence = {}  # group id -> ops so far
        self.broken = False

    def install(self):
        import inspect

        import torch.distributed as dist

        self.dist = dist
        for function_name, (kind, sent, other) in self.FUNCTIONS.items():
            original = getattr(dist, function_name, None)
            if original is None:
                continue
            signature = inspect.signature(original)
            setattr(dist, function_name,
                    self._wrap(original, signature, function_name, kind, sent, other))
        return self

    def _wrap(self, original, signature, function_name, kind, sent, other):
        capture = self
        name_id = _recorder.name(f"torch.distributed.{function_name}")

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if capture.broken or not _recorder.recording():
                return original(*args, **kwargs)
            begin = _recorder.library.moescope_now_ns()
            result = original(*args, **kwargs)
            end = _recorder.library.moescope_now_ns()
            try:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                capture._record(bound.arguments, kind, sent, other, name_id, begin, end)
            except Exception as error:  # noqa: BLE001
                capture.broken = True
                warn(f"collective capture stopped: {type(error).__name__}: {error}")
                note(f"collective capture stopped: {type(error).__name__}: {error}")
            return result

        return wrapper

    def _group(self, group):
        """(stable id, this rank's index, size, global ranks, backend) of `group`."""
        dist = self.dist
        group = group if group is not None else dist.group.WORLD
        ranks = dist.get_process_group_ranks(group)
        backend = str(dist.get_backend(group))
        index = ranks.index(dist.get_rank()) if dist.get_rank() in ranks else -1
        group_name = getattr(group, "group_name", "") or ",".join(map(str, ranks))
        comm_id = zlib.crc32(f"{group_name}:{ranks}".encode()) | (len(ranks) << 32)
        return comm_id, index, len(ranks), ranks, backend

    def _record(self, arguments, kind, sent, other, name_id, begin, end):
        comm_id, index, size, ranks, backend = self._group(arguments.get("group"))
        if "nccl" in backend:
            return  # the NCCL interposer records these with their GPU times
        payload = arguments.get(sent) if sent else None
        tensors = payload if isinstance(payload, (list, tuple)) else ([payload] if payload is not None else [])
        tensors = [tensor for tensor in tensors if tensor is not None]
        info = _recorder.CommOpInfo()
        info.kind = _recorder.COMM_KINDS[kind]
        info.bytes = sum(tensor_bytes(tensor) for tensor in tensors)
        info.count = sum(tensor.numel() for tensor in tensors)
        info.dtype = dtype_code(tensors[0]) if tensors else 0
        info.comm_id = comm_id
        info.rank, info.num_ranks = index, size
        info.peer = info.root = -1
        target = arguments.get(other) if other else None
        if target is not None and target in ranks:
            if kind in ("send", "recv"):
                info.peer = ranks.index(target)
            else:
                info.root = ranks.index(target)
        info.device = -1 if not tensors or tensors[0].device.type == "cpu" else tensors[0].device.index
        self.sequence[comm_id] = self.sequence.get(comm_id, -1) + 1
        info.sequence = self.sequence[comm_id]
        info.enqueue_ns, info.start_ns, info.end_ns = begin, begin, end
        info.name = name_id
        splits = self._split_bytes(kind, arguments, tensors, size)
        if splits:
            array = (ctypes.c_uint64 * len(splits))(*splits)
            info.split_bytes, info.num_splits = array, len(splits)
        _recorder.library.moescope_comm_op(ctypes.byref(info))

    @staticmethod
    def _split_bytes(kind, arguments, tensors, size):
        """Bytes this rank sends to each rank of the group, for all-to-all."""
        if kind != "all_to_all" or not tensors or size <= 0:
            return None
        if len(tensors) > 1:  # all_to_all: one tensor per peer
            return [tensor_bytes(tensor) for tensor in tensors]
        tensor = tensors[0]
        splits = arguments.get("input_split_sizes")
        if not splits:
            return [tensor_bytes(tensor) // size] * size
        row_bytes = tensor_bytes(tensor) // max(1, tensor.shape[0])
        return [int(rows) * row_bytes for rows in splits]
