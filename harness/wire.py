"""The messages between the judge and the worker, and how the judge reads the worker's safely.

The worker runs the submission, so whatever it sends may have been written by the submission.
A plain `recv` would unpickle it, and a pickle can call any function: one forged message would
run code in the judge. So the judge reads the worker's messages with an unpickler that knows
only what replies are made of: plain values (numbers, strings, tuples, lists, dicts) and torch
tensors, which arrive as shared memory (CPU) or CUDA IPC handles and are rebuilt by torch's own
functions. Nothing else can be named in a reply.
"""

import io
import pickle
from multiprocessing.reduction import ForkingPickler

import torch

PROGRESS = "progress"  # worker -> judge, any number before a reply: a line for the progress display
REPLY = "reply"  # worker -> judge: (REPLY, value)
RAISED = "raised"  # worker -> judge: (RAISED, description, str(exception), caught by the competition?)

_TORCH_CLASSES = {"Size", "Tensor", "device", "UntypedStorage", "TypedStorage"}


def _allowed(module: str, name: str) -> bool:
    if module == "torch.multiprocessing.reductions":
        return name.startswith("rebuild_")
    if module in ("torch", "torch.storage"):
        return name in _TORCH_CLASSES or isinstance(getattr(torch, name, None), torch.dtype)
    return (module, name) == ("multiprocessing.resource_sharer", "DupFd")


class UntrustedMessageError(Exception):
    """A worker's message named something a reply never holds."""


class _ReplyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if not _allowed(module, name):
            raise UntrustedMessageError(f"the worker's message names {module}.{name}, which no reply holds")
        return super().find_class(module, name)


def encode(message) -> bytes:
    """With torch's reductions: tensors travel as shared memory or CUDA IPC handles."""
    return bytes(ForkingPickler.dumps(message))


def send(connection, message) -> None:
    connection.send_bytes(encode(message))


def receive_untrusted(connection):
    return _ReplyUnpickler(io.BytesIO(connection.recv_bytes())).load()


def storage_index(held: list) -> dict:
    """Where each shared tensor's memory starts -> (input index, tensor index), for `returned`."""
    return {tensor.untyped_storage().data_ptr(): (i, j) for i, data in enumerate(held) for j, tensor in enumerate(data)}


def returned(output, storages: dict) -> tuple:
    """What a call returned, as the worker hands it to the judge.

    A tensor in memory the judge shares (c itself, or any view of an input) goes back as a view
    of that memory, for the judge to rebuild on its own copy; another tensor goes as itself
    (CUDA IPC or shared memory); anything else by its type's name only.
    """
    if not isinstance(output, torch.Tensor):
        return ("not a tensor", type(output).__name__)
    shared = storages.get(output.untyped_storage().data_ptr())
    if shared is None:
        return ("own", output)
    byte_offset = output.data_ptr() - output.untyped_storage().data_ptr()
    return ("view", *shared, byte_offset, tuple(output.shape), tuple(output.stride()), str(output.dtype).removeprefix("torch."))


def _within(nbytes: int, byte_offset: int, shape, stride, itemsize: int) -> bool:
    """Whether the view lies inside the storage (set_ itself checks nothing)."""
    if byte_offset < 0 or byte_offset % itemsize or any(size < 0 for size in shape) or any(step < 0 for step in stride):
        return False
    if 0 in shape:
        return True
    last = byte_offset // itemsize + sum((size - 1) * step for size, step in zip(shape, stride))
    return len(shape) == len(stride) and (last + 1) * itemsize <= nbytes


class NotATensor:
    """Stands in the judge for a returned object that is no tensor: only its type's name came back."""

    def __init__(self, type_name: str):
        self.type_name = type_name


def rebuild(spec: tuple, held: list):
    """The judge's side of `returned`: the output as a tensor the judge can read."""
    kind, *fields = spec
    if kind == "not a tensor":
        return NotATensor(str(fields[0]))
    if kind == "own":
        return fields[0]
    i, j, byte_offset, shape, stride, dtype_name = fields
    base = held[i][j]
    dtype = getattr(torch, dtype_name)
    if not isinstance(dtype, torch.dtype) or not _within(base.untyped_storage().nbytes(), byte_offset, shape, stride, dtype.itemsize):
        raise UntrustedMessageError(f"the worker described a view outside the memory it shares ({dtype_name} {shape} at byte {byte_offset})")
    view = torch.empty(0, dtype=dtype, device=base.device)
    try:
        return view.set_(base.untyped_storage(), byte_offset // dtype.itemsize, shape, stride)
    except (RuntimeError, TypeError, ValueError) as error:
        raise UntrustedMessageError(f"the worker described a view the judge cannot make ({dtype_name} {shape}: {error})") from None
