"""A lander's side of agent/transfer/landproc.py: batches in on stdin, answers out on stdout.

Each batch is landed by the receiver's own code (`Receiver._apply_job`), one receiver per
calling receiver (`token`, the most recent `RECEIVERS` kept), so what a lander knows of
one transfer's directories never carries into another. The answer is the batch's file
bytes, whole files and last path, the files that landed and verified, those that did not
with why, whether a link was made, the new directories made in the stage, and the error
that ended the batch if one did.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import os
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

from agent.fdio import write_all
from agent.transfer.landproc import ANSWER, IN_PLACE, PER_FILE, READY, REQUEST, Done, Where
from agent.transfer.memory import RELAXED_GEN0
from agent.transfer.receiver import Receiver, decode_batch

RECEIVERS = 16


def serve() -> None:
    """Say it has started, then answer batches until stdin ends (the parent closed it or
    exited). A parent gone under a batch (its operator killed) leaves nobody to answer:
    the lander ends quietly, without a traceback in the stderr it shares with the user's
    terminal or log."""
    with contextlib.suppress(BrokenPipeError):
        _serve()


def _serve() -> None:
    gc.set_threshold(RELAXED_GEN0)  # nothing a batch makes is cyclic garbage (memory.py)
    requests, answers = sys.stdin.buffer, os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a stray print must not land in the answers
    write_all(answers.fileno(), READY)
    receivers: OrderedDict[int, Receiver] = OrderedDict()
    while head := requests.read(REQUEST.size):
        if len(head) < REQUEST.size:
            return
        token, reserve, kind, flags, root_size, stage_size, size = REQUEST.unpack(head)
        root = os.fsdecode(requests.read(root_size))
        stage = os.fsdecode(requests.read(stage_size)) or None
        body = requests.read(size)
        if len(body) < size:
            return
        in_place, per_file = bool(flags & IN_PLACE), bool(flags & PER_FILE)
        where = Where(token, root, in_place, per_file, stage, reserve)
        answer = marshal.dumps(land(receivers, where, kind, body))
        write_all(answers.fileno(), ANSWER.pack(len(answer)) + answer)


def land(
    receivers: OrderedDict[int, Receiver], where: Where, kind: int, body: bytes
) -> tuple[Any, ...]:
    """Land one batch with the receiver of `where.token`; the answer `_Lander.land` reads."""
    receiver = receivers.get(where.token)
    if receiver is None:
        receiver = receivers[where.token] = Receiver(
            Path(where.root), in_place=where.in_place, per_file=where.per_file, stage=where.stage
        )
        while len(receivers) > RECEIVERS:
            receivers.popitem(last=False)
    receivers.move_to_end(where.token)
    receiver.reserve(where.reserve)
    receiver.verified.clear()
    receiver.failed.clear()
    done: Done = (0, 0, None)
    error = None
    try:
        done = receiver._apply_job(decode_batch(kind, body))
    except Exception as exc:  # told to the caller, which raises it there
        error = (type(exc).__name__, str(exc))
    landed = [(x.path, x.size, x.mode, x.sha256) for x in receiver.verified.values()]
    failed = list(receiver.failed.items())
    lander = receiver._lander
    return (*done, landed, failed, lander.made_links, lander.take_new(), error)
