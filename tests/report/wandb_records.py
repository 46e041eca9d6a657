"""Read a W&B offline run file (`run-*.wandb`) back into the library's own protobuf records.

wandb 0.31 no longer ships a Python reader for its transaction log; the file
is a LevelDB-style log (a 7-byte header, then 32 KiB blocks of records framed
as crc32c(4) length(2, LE) type(1): FULL, FIRST, MIDDLE, LAST) whose payloads
are `wandb.proto.wandb_internal_pb2.Record` messages. This unframes the log
and parses each payload with wandb's own protobuf class.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(path: Path) -> list[bytes]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    out, pos, pending = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        if length == 0 and kind == 0:
            pos += left  # zero padding to the next block
            continue
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            out.append(pending + chunk)
            pending = b""
    return out


def read_run(run_folder: Path) -> dict:
    """{"run": {name, group, job_type, config}, "history": [{key: value}], "summary": {key: value}}."""
    from wandb.proto import wandb_internal_pb2 as pb

    def key(item) -> str:
        return item.key or "/".join(item.nested_key)

    files = sorted(Path(run_folder).glob("run-*.wandb"))
    assert files, f"no run-*.wandb in {run_folder}"
    out = {"run": {}, "history": [], "summary": {}}
    for raw in payloads(files[0]):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            out["run"] = {"name": rec.run.display_name, "group": rec.run.run_group, "job_type": rec.run.job_type,
                          "config": {key(i): json.loads(i.value_json) for i in rec.run.config.update}}
        elif kind == "history":
            out["history"].append({key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            out["summary"].update({key(i): json.loads(i.value_json) for i in rec.summary.update})
    return out
