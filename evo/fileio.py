"""Writing files so that a kill never leaves half of one, and values JSON can hold.

Every artifact, journal, diagnosis and report is written through here: to a
temporary file beside the target, then renamed over it (`os.replace` is atomic
on POSIX), so a reader sees the old file or the new one, never a torn one. The
step journal also fsyncs, because a resumed step trusts it.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def jsonable(value: Any) -> Any:
    """A copy JSON can hold: numpy scalars and arrays as plain numbers and lists, NaN/inf as None, keys as str."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@contextmanager
def replaced(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; once the block has written it, rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes, *, fsync: bool = False) -> Path:
    """Write `data` to `path` atomically (`fsync`: durable before the rename, for what a resume trusts)."""
    with replaced(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
    return Path(path)


def write_json(data: Any, path: str | Path, *, indent: int | None = 2, fsync: bool = False) -> Path:
    """`data` as JSON (made `jsonable` first), atomically, with a trailing newline."""
    return write_atomic(path, json.dumps(jsonable(data), indent=indent, default=str) + "\n", fsync=fsync)
