"""The messages between the judge and the worker, and how the judge reads the worker's safely.

The worker runs the submission, so whatever it sends may have been written by the submission.
A plain `recv` would unpickle it, and a pickle can call any function: one forged message would
run code in the judge. So the judge reads the worker's messages with an unpickler that knows
only what replies are made of: plain values (numbers, strings, tuples, lists, dicts) and torch
tensors, which arrive as shared memory (CPU) or CUDA IPC handles and are rebuilt by torch's own
functions. Nothing else can be named in a reply.

A case's inputs are any problem's: a tuple of tensors, or tensors nested in tuples, lists and
dicts beside plain values (the grouped GEMM's lists of per-group tuples and its sizes). A place
in them is a path, the indices from the outside in (`(0, 1, 2)` is `data[0][1][2]`); `leaves`,
`at` and `map_tensors` walk them. What a call returns is a tensor or a list or tuple of tensors,
described for the judge with paths into what the worker holds; the judge rebuilds a description
only within bounds of depth and length that no honest reply comes near.
"""

import io
import pickle
from multiprocessing.reduction import ForkingPickler

import torch

PROGRESS = "progress"  # worker -> judge, any number before a reply: a line for the progress display
REPLY = "reply"  # worker -> judge: (REPLY, value)
RAISED = "raised"  # worker -> judge: (RAISED, description, str(exception), caught by the competition?, origin)

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


# A message longer than this is refused unread: tensors travel as handles, and an honest reply
# (outputs, a round's GPU activity, a profile table) is a small fraction of it.
MAX_MESSAGE_BYTES = 64 << 20


def receive_untrusted(connection):
    return _ReplyUnpickler(io.BytesIO(connection.recv_bytes(MAX_MESSAGE_BYTES))).load()


def _children(node):
    if isinstance(node, (tuple, list)):
        return enumerate(node)
    if isinstance(node, dict):
        return node.items()
    return ()


def leaves(data, path: tuple = ()):
    """(path, tensor) for every tensor in `data`, in order."""
    if isinstance(data, torch.Tensor):
        yield path, data
        return
    for key, child in _children(data):
        yield from leaves(child, (*path, key))


def at(data, path: tuple):
    for key in path:
        data = data[key]
    return data


def map_tensors(data, function):
    """`data` with every tensor replaced by function(tensor); tuples, lists and dicts rebuilt as
    such, anything else kept as it is."""
    if isinstance(data, torch.Tensor):
        return function(data)
    if isinstance(data, list):
        return [map_tensors(item, function) for item in data]
    if isinstance(data, tuple):
        return tuple(map_tensors(item, function) for item in data)
    if isinstance(data, dict):
        return {key: map_tensors(value, function) for key, value in data.items()}
    return data


def storage_index(held: list) -> dict:
    """(device, where its memory starts) of each shared tensor's storage -> its path in `held`
    (the call's index first), for `returned`."""
    return {(tensor.device, tensor.untyped_storage().data_ptr()): path for path, tensor in leaves(held)
            if tensor.untyped_storage().data_ptr()}


# What a reply may describe: outputs nested this deep (a list of tensors is one level), lists this
# long, paths into the held inputs this long. An honest reply stays far inside.
MAX_DEPTH = 2
MAX_ITEMS = 1024
MAX_PATH = 8


def returned(output, storages: dict, depth: int = 0) -> tuple:
    """What a call returned, as the worker hands it to the judge.

    A tensor in memory the judge shares (an output buffer itself, or any view of an input) goes
    back as a view of that memory, for the judge to rebuild on its own copy; another tensor goes
    as itself (CUDA IPC or shared memory); a list or tuple as the description of each item, up to
    the bounds above; anything else by its type's name only.
    """
    if type(output) in (list, tuple):
        if depth >= MAX_DEPTH or len(output) > MAX_ITEMS:
            return ("not a tensor", f"{type(output).__name__} of {len(output)} item{'s' if len(output) != 1 else ''}")
        return ("sequence", type(output).__name__, [returned(item, storages, depth + 1) for item in output])
    if not isinstance(output, torch.Tensor):
        return ("not a tensor", type(output).__name__)
    shared = storages.get((output.device, output.untyped_storage().data_ptr()))
    if shared is None:
        return ("own", output)
    byte_offset = output.data_ptr() - output.untyped_storage().data_ptr()
    return ("view", shared, byte_offset, tuple(output.shape), tuple(output.stride()), str(output.dtype).removeprefix("torch."))


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


def _held_tensor(held: list, path) -> torch.Tensor:
    """The tensor at `path` in `held`, each step checked: the reply names the path."""
    if not isinstance(path, tuple) or not 0 < len(path) <= MAX_PATH:
        raise UntrustedMessageError(f"the worker named no place in the inputs it holds ({path!r:.80})")
    node = held
    for key in path:
        if isinstance(node, (tuple, list)) and type(key) is int and 0 <= key < len(node):
            node = node[key]
        elif isinstance(node, dict) and type(key) in (int, str) and key in node:
            node = node[key]
        else:
            raise UntrustedMessageError(f"the worker named a place the inputs it holds lack ({path!r:.80})")
    if not isinstance(node, torch.Tensor):
        raise UntrustedMessageError(f"the worker named a place in the inputs that holds no tensor ({path!r:.80})")
    return node


def rebuild(spec, held: list, depth: int = 0):
    """The judge's side of `returned`: the output as the judge can read it, a tensor, a list or
    tuple of them, or a NotATensor; a description beyond the bounds or of anything else is refused."""
    if not isinstance(spec, tuple) or not spec:
        raise UntrustedMessageError(f"the worker described an output as {type(spec).__name__}")
    kind, *fields = spec
    if kind == "not a tensor" and len(fields) == 1:
        return NotATensor(str(fields[0])[:200])
    if kind == "own" and len(fields) == 1 and isinstance(fields[0], torch.Tensor):
        return fields[0]
    if kind == "sequence" and len(fields) == 2 and fields[0] in ("list", "tuple") and isinstance(fields[1], list):
        if depth >= MAX_DEPTH or len(fields[1]) > MAX_ITEMS:
            raise UntrustedMessageError(f"the worker described outputs nested {depth + 1} deep, {len(fields[1])} long: "
                                        f"beyond what any reply holds ({MAX_DEPTH} deep, {MAX_ITEMS} long)")
        items = [rebuild(item, held, depth + 1) for item in fields[1]]
        return items if fields[0] == "list" else tuple(items)
    if kind != "view" or len(fields) != 5:
        raise UntrustedMessageError(f"the worker described an output as {str(kind)[:80]!r}, which no reply holds")
    path, byte_offset, shape, stride, dtype_name = fields
    base = _held_tensor(held, path)
    dtype = getattr(torch, str(dtype_name), None)
    if not isinstance(dtype, torch.dtype) or not _within(base.untyped_storage().nbytes(), byte_offset, shape, stride, dtype.itemsize):
        raise UntrustedMessageError(f"the worker described a view outside the memory it shares ({dtype_name} {shape} at byte {byte_offset})")
    view = torch.empty(0, dtype=dtype, device=base.device)
    try:
        return view.set_(base.untyped_storage(), byte_offset // dtype.itemsize, shape, stride)
    except (RuntimeError, TypeError, ValueError) as error:
        raise UntrustedMessageError(f"the worker described a view the judge cannot make ({dtype_name} {shape}: {error})") from None
