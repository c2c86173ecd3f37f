"""The messages between the judge and the worker, and how the judge reads the worker's safely.

The worker runs the submission, so whatever it sends may have been written by the submission.
A plain `recv` would unpickle it, and a pickle can call any function: one forged message would
run code in the judge. So the judge reads the worker's messages with an unpickler that names no
class at all: plain values only (numbers, strings, bytes, tuples, lists, dicts keyed by strings),
in time linear in the message's length. No descriptor crosses from a worker to the judge, and
nothing the judge rebuilds does I/O on a worker's say. Every number the worker claims (a time, GPU
activity) passes harness/judge/claims.py as it arrives, before the judge computes with it.

Tensors travel as descriptions. The judge's requests carry the inputs it shares: a CUDA tensor as
its allocation's IPC handle and place (harness/shared/cuda_ipc.py), a CPU tensor as a place in a sealed
memfd whose descriptor follows the request on the socket (harness/shared/host_memory.py). A worker's
reply describes each output: a view of memory the judge shares (its path in the inputs and its
place), a CUDA tensor of its own as an IPC handle, or a CPU tensor of its own as its bytes.

A case's inputs are any problem's: a tuple of tensors, or tensors nested in tuples, lists and
dicts beside plain values (the grouped GEMM's lists of per-group tuples and its sizes). A place
in them is a path, the indices from the outside in (`(0, 1, 2)` is `data[0][1][2]`); `leaves`,
`at` and `map_tensors` walk them. What a call returns is a tensor or a list or tuple of tensors,
described for the judge with paths into what the worker holds; the judge rebuilds a description
only within bounds of depth and length that no honest reply comes near.
"""

import dataclasses
import io
import pickle
import socket

import torch

from harness.shared import cuda_ipc
from harness.shared.host_memory import MappedArenas

READY = "ready"  # worker -> judge, its first message: (READY,), its start over (its device's context made)
PROGRESS = "progress"  # worker -> judge, any number before a reply: a line for the progress display
REPLY = "reply"  # worker -> judge: (REPLY, value)
RAISED = "raised"  # worker -> judge: (RAISED, description, str(exception), caught by the competition?, (type, file, line))

# The most descriptors one request carries (the kernel passes at most 253 in one message).
MAX_FDS = 250


class UntrustedMessageError(Exception):
    """A worker's message named something a reply never holds."""


class _PlainValuesUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise UntrustedMessageError(f"the worker's message names {module}.{name}: a reply holds plain values only")


class _StrKeyedUnpickler(pickle._Unpickler):
    """Plain values as _PlainValuesUnpickler reads them, every dict keyed by strings only and no set.

    The C unpickler fills a dict or a set key by key, holding the interpreter's lock: keys whose
    hashes are all equal (ints a multiple of 2**61 - 1 apart, whose hash the worker computes as
    the judge does) make that quadratic in the message's length, hours for a few megabytes, with
    no watchdog able to run meanwhile. A string's hash is keyed by a secret of the judge's
    process, so keys the worker chose cannot collide; this reader checks each key before it is
    inserted. Pure Python, so it reads only what is longer than FAST_READ_BYTES."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def find_class(self, module: str, name: str):
        raise UntrustedMessageError(f"the worker's message names {module}.{name}: a reply holds plain values only")

    @staticmethod
    def _keys(keys) -> None:
        for key in keys:
            if type(key) is not str:
                raise UntrustedMessageError(f"the worker's message keys a dict by {type(key).__name__}: a reply's dicts are "
                                            "keyed by strings only")

    def load_setitem(self):
        value, key = self.stack.pop(), self.stack.pop()
        self._keys((key,))
        self.stack[-1][key] = value
    dispatch[pickle.SETITEM[0]] = load_setitem

    def load_setitems(self):
        items = self.pop_mark()
        self._keys(items[::2])
        target = self.stack[-1]
        for index in range(0, len(items), 2):
            target[items[index]] = items[index + 1]
    dispatch[pickle.SETITEMS[0]] = load_setitems

    def load_dict(self):
        items = self.pop_mark()
        self._keys(items[::2])
        self.append({items[index]: items[index + 1] for index in range(0, len(items), 2)})
    dispatch[pickle.DICT[0]] = load_dict

    def load_set(self):
        raise UntrustedMessageError("the worker's message holds a set, which no reply holds")
    for opcode in (pickle.EMPTY_SET, pickle.ADDITEMS, pickle.FROZENSET):
        dispatch[opcode[0]] = load_set
    del opcode


def dtype_named(name) -> torch.dtype:
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise UntrustedMessageError(f"no dtype is named {str(name)[:40]!r}")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# -- the judge's requests (trusted: read with plain pickle by the worker) --------------------------

@dataclasses.dataclass(frozen=True)
class SharedTensor:
    """A tensor the judge shares, as a request carries it: ("cuda", device, handle, place in the
    allocation, storage bytes) or ("host", descriptor slot, offset, storage bytes), then its
    dtype, shape and strides."""

    memory: tuple
    dtype: str
    shape: tuple
    stride: tuple
    storage_offset: int = 0


def send_request(connection, request_socket: socket.socket, message, describe) -> None:
    """`message` with each tensor replaced by describe(tensor, fds) (a SharedTensor; a CPU
    tensor's memfd appended to `fds`), then the descriptors, if any, on the socket."""
    fds: list[int] = []
    described = map_tensors(message, lambda tensor: describe(tensor, fds))
    if len(fds) > MAX_FDS:
        raise ValueError(f"a request carries at most {MAX_FDS} shared files")
    connection.send_bytes(pickle.dumps((described, len(fds))))
    if fds:
        socket.send_fds(request_socket, [b"F"], fds)


def receive_request(connection, request_socket: socket.socket, opened: "cuda_ipc.OpenedBlocks"):
    """The worker's side of `send_request`: the message with its tensors mapped."""
    described, fd_count = pickle.loads(connection.recv_bytes())
    fds = socket.recv_fds(request_socket, 1, fd_count)[1] if fd_count else []
    arenas = MappedArenas(fds)

    def rebuild_shared(node):
        if not isinstance(node, SharedTensor):
            return node
        dtype = dtype_named(node.dtype)
        if node.memory[0] == "cuda":
            _, device, handle, place, nbytes = node.memory
            flat = opened.storage(device, handle, place, nbytes)
            return flat.view(dtype).as_strided(node.shape, node.stride, node.storage_offset)
        _, slot, offset, nbytes = node.memory
        return arenas.tensor(slot, offset, nbytes, dtype, node.shape, node.stride, node.storage_offset)
    return _map_nodes(described, rebuild_shared)


# -- the worker's replies (untrusted: read by the judge as plain values) ---------------------------

def encode(message) -> bytes:
    """A worker's message: plain values only (tensors already described by `returned`)."""
    return pickle.dumps(message)


def send(connection, message) -> None:
    connection.send_bytes(encode(message))


# A message longer than this is refused unread: an honest reply (outputs, which come back as
# views, handles, or for a CPU tensor of its own its bytes; a round's GPU activity; a profile
# table) stays well inside.
MAX_MESSAGE_BYTES = 256 << 20


# The most values one message may hold, each counted as often as it is reached: a pickle can make
# a list that holds itself twice at every level, a few bytes that unfold without end when walked
# or formatted.
MAX_MESSAGE_NODES = 1 << 20


def _within_bounds(message) -> None:
    """Refused: more values than MAX_MESSAGE_NODES, a set, a dict keyed by anything but strings
    (what _StrKeyedUnpickler refuses while it reads, refused of a short message too)."""
    stack, count = [message], 0
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_MESSAGE_NODES:
            raise UntrustedMessageError(f"the worker's message holds more than {MAX_MESSAGE_NODES} values")
        if isinstance(node, (tuple, list)):
            stack.extend(node)
        elif isinstance(node, dict):
            _StrKeyedUnpickler._keys(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (set, frozenset)):
            _StrKeyedUnpickler.load_set(None)


# A message this long or shorter is read by the C unpickler: no dict or set it can hold costs the
# judge more than some 30 ms however its keys collide (the reply of a timed round, read inside the
# judge's window, is far shorter). A longer one is read by _StrKeyedUnpickler.
FAST_READ_BYTES = 16 << 10


def unpickle_untrusted(data: bytes):
    """A worker's message as plain values, refused where it names anything else or holds more
    values than any reply does; read in time linear in its length."""
    reader = _PlainValuesUnpickler if len(data) <= FAST_READ_BYTES else _StrKeyedUnpickler
    message = reader(io.BytesIO(data)).load()
    _within_bounds(message)
    return message


def receive_untrusted(connection):
    return unpickle_untrusted(connection.recv_bytes(MAX_MESSAGE_BYTES))


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


def _map_nodes(data, function):
    """`data` with every node that is no tuple, list or dict (a SharedTensor included) replaced by function(node)."""
    if isinstance(data, list):
        return [_map_nodes(item, function) for item in data]
    if isinstance(data, tuple) and not isinstance(data, SharedTensor):
        return tuple(_map_nodes(item, function) for item in data)
    if isinstance(data, dict):
        return {key: _map_nodes(value, function) for key, value in data.items()}
    return function(data)


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
    the bounds above (torch's named results, `torch.geqrf`'s, as the tuples they are); anything
    else by its type's name only.
    """
    named_result = isinstance(output, tuple) and type(output).__module__ == "torch.return_types"
    if type(output) in (list, tuple) or named_result:
        kind = "tuple" if named_result else type(output).__name__
        if depth >= MAX_DEPTH or len(output) > MAX_ITEMS:
            return ("not a tensor", f"{kind} of {len(output)} item{'s' if len(output) != 1 else ''}")
        return ("sequence", kind, [returned(item, storages, depth + 1) for item in output])
    if not isinstance(output, torch.Tensor):
        return ("not a tensor", type(output).__name__)
    shared = storages.get((output.device, output.untyped_storage().data_ptr()))
    layout = (tuple(output.shape), tuple(output.stride()), dtype_name(output.dtype))
    if shared is None and output.is_cuda:
        storage_offset = output.data_ptr() - output.untyped_storage().data_ptr()
        return ("own cuda", cuda_ipc.export(output), storage_offset, *layout)
    if shared is None:
        data = output.detach().contiguous()
        return ("own host", data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b"", tuple(output.shape),
                dtype_name(output.dtype))
    byte_offset = output.data_ptr() - output.untyped_storage().data_ptr()
    return ("view", shared, byte_offset, *layout)


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


def _own_cuda(fields, opened: cuda_ipc.OpenedBlocks) -> torch.Tensor:
    (device, handle, place, nbytes), storage_offset, shape, stride, dtype_name_ = fields
    dtype = dtype_named(dtype_name_)
    if not _within(nbytes, storage_offset, shape, stride, dtype.itemsize):
        raise UntrustedMessageError(f"the worker described a tensor outside its own memory ({dtype_name_} {shape})")
    try:
        flat = opened.storage(device, handle, place, nbytes)
    except (cuda_ipc.CudaIpcError, TypeError, ValueError) as error:
        raise UntrustedMessageError(f"the judge cannot open the worker's own output ({error})") from None
    return flat.view(dtype).as_strided(tuple(shape), tuple(stride), storage_offset // dtype.itemsize)


def _own_host(fields) -> torch.Tensor:
    data, shape, dtype_name_ = fields
    dtype = dtype_named(dtype_name_)
    if not isinstance(data, bytes) or any(type(size) is not int or size < 0 for size in shape):
        raise UntrustedMessageError("the worker described a CPU output that is no array of bytes")
    numel = 1
    for size in shape:
        numel *= size
    if numel * dtype.itemsize != len(data):
        raise UntrustedMessageError(f"the worker sent {len(data)} bytes for a {dtype_name_} tensor of shape {tuple(shape)}")
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(tuple(shape))


def rebuild(spec, held: list, opened: cuda_ipc.OpenedBlocks, depth: int = 0):
    """The judge's side of `returned`: the output as the judge can read it, a tensor, a list or
    tuple of them, or a NotATensor; a description beyond the bounds or of anything else is refused."""
    if not isinstance(spec, tuple) or not spec:
        raise UntrustedMessageError(f"the worker described an output as {type(spec).__name__}")
    kind, *fields = spec
    if kind == "not a tensor" and len(fields) == 1:
        return NotATensor(str(fields[0])[:200])
    if kind == "own cuda" and len(fields) == 5:
        return _own_cuda(fields, opened)
    if kind == "own host" and len(fields) == 3:
        return _own_host(fields)
    if kind == "sequence" and len(fields) == 2 and fields[0] in ("list", "tuple") and isinstance(fields[1], list):
        if depth >= MAX_DEPTH or len(fields[1]) > MAX_ITEMS:
            raise UntrustedMessageError(f"the worker described outputs nested {depth + 1} deep, {len(fields[1])} long: "
                                        f"beyond what any reply holds ({MAX_DEPTH} deep, {MAX_ITEMS} long)")
        items = [rebuild(item, held, opened, depth + 1) for item in fields[1]]
        return items if fields[0] == "list" else tuple(items)
    if kind != "view" or len(fields) != 5:
        raise UntrustedMessageError(f"the worker described an output as {str(kind)[:80]!r}, which no reply holds")
    path, byte_offset, shape, stride, dtype_name_ = fields
    base = _held_tensor(held, path)
    dtype = getattr(torch, str(dtype_name_), None)
    if not isinstance(dtype, torch.dtype) or not _within(base.untyped_storage().nbytes(), byte_offset, shape, stride, dtype.itemsize):
        raise UntrustedMessageError(f"the worker described a view outside the memory it shares ({dtype_name_} {shape} at byte {byte_offset})")
    view = torch.empty(0, dtype=dtype, device=base.device)
    try:
        return view.set_(base.untyped_storage(), byte_offset // dtype.itemsize, shape, stride)
    except (RuntimeError, TypeError, ValueError) as error:
        raise UntrustedMessageError(f"the worker described a view the judge cannot make ({dtype_name_} {shape}: {error})") from None
