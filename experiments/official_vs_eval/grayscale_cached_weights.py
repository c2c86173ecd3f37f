"""pmpp_v2/grayscale_py's reference solution with its weights made once, not copied from host
memory in every call: a grayscale call that never waits for the GPU, to time beside the one that
does (`process_context.py --submission` this file)."""

import torch
from task import input_t, output_t

_weights = {}


def custom_kernel(data: input_t) -> output_t:
    data, output = data
    key = (data.device, data.dtype)
    if key not in _weights:
        _weights[key] = torch.tensor([0.2989, 0.5870, 0.1140], device=data.device, dtype=data.dtype)
    output[...] = torch.sum(data * _weights[key], dim=-1)
    return output
