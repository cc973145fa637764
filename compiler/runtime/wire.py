"""Messages between the driver and stage workers over torch.distributed (gloo on CPU).

Control messages are JSON objects sent as a length then UTF-8 bytes; tensors
go as raw sends whose shapes both ends know from the step description (nothing
is pickled). Tags keep the streams apart so a message of one kind never
matches a receive of another: `CONTROL` (driver -> worker commands), `ACK`
(worker -> driver replies), `DATA` (hidden states and logits along a route),
`KV` (KV-cache hand-offs), `DRAFT` (draft token ids, drafter -> target and driver).
"""

from __future__ import annotations

import json
from typing import Any

CONTROL, ACK, DATA, KV, DRAFT = 1, 2, 3, 4, 5


def send_json(obj: Any, dst: int, tag: int) -> None:
    import torch
    import torch.distributed as dist

    payload = json.dumps(obj, separators=(",", ":")).encode()
    dist.send(torch.tensor([len(payload)], dtype=torch.int64), dst=dst, tag=tag)
    dist.send(torch.frombuffer(bytearray(payload), dtype=torch.uint8), dst=dst, tag=tag)


def _payload(src: int, tag: int, size: int) -> Any:
    import torch
    import torch.distributed as dist

    buf = torch.empty(size, dtype=torch.uint8)
    dist.recv(buf, src=src, tag=tag)
    return json.loads(bytes(buf.numpy()).decode())


def recv_json(src: int, tag: int) -> Any:
    import torch
    import torch.distributed as dist

    size = torch.empty(1, dtype=torch.int64)
    dist.recv(size, src=src, tag=tag)
    return _payload(src, tag, int(size.item()))
