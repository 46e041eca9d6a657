"""Task files shared by the math, code and swe domains: JSONL, one task per line.

A domain's options name a file per split (`train_file`, `validation_file`, or
`files: {split: path}` for more splits such as a user's `aime24`); a relative
path is taken from the current folder (the workspace when `evo` runs). Without
options the small sample files shipped in `evo/data/domains/<domain>/` are used.
Errors name the file, the line and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from evo.domains.base import Task
from evo.errors import ConfigError
from evo.resources import data_dir


def shipped_dir(domain: str) -> Path:
    return data_dir() / "domains" / domain


def split_files(domain: str, train_file: str | None, validation_file: str | None,
                files: dict | None) -> dict[str, Path]:
    """Map split name -> JSONL path, from the options or the shipped samples."""
    out: dict[str, Path] = {}
    for split in ("train", "validation"):
        default = shipped_dir(domain) / f"{split}.jsonl"
        if default.exists():
            out[split] = default
    if files is not None and not isinstance(files, dict):
        raise ConfigError(f"recipe.yaml: domain.options.files: {files!r} must map split names to JSONL paths")
    named = {"train": train_file, "validation": validation_file}  # these win over the same split in `files`
    for split, path in {**(files or {}), **{k: v for k, v in named.items() if v is not None}}.items():
        if path is None:
            continue
        if not isinstance(path, str) or not path:
            raise ConfigError(f"recipe.yaml: domain.options: the {split} file {path!r} must be a path to a JSONL file")
        resolved = Path(path).expanduser()
        if not resolved.is_file():
            raise ConfigError(f"recipe.yaml: domain.options: {split} file {path!r} does not exist; "
                              "give a JSONL path relative to the workspace or absolute")
        out[split] = resolved.resolve()
    return out


def write_splits(domain: str, splits: dict[str, list[dict]], folder: Path | None = None) -> dict[str, Path]:
    """Write generated task rows as `<split>.jsonl` files (by default the shipped ones of `domain`)."""
    folder = Path(folder or shipped_dir(domain))
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in splits.items():
        paths[split] = folder / f"{split}.jsonl"
        paths[split].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return paths


def read_jsonl(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line number, row) for every row of `path`; each must be an object holding the `required` keys."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{lineno}: malformed JSON ({exc.msg}); one JSON object per line") from None
            if not isinstance(row, dict):
                raise ConfigError(f"{path}:{lineno}: expected a JSON object, found {type(row).__name__}")
            missing = [k for k in required if k not in row]
            if missing:
                raise ConfigError(f"{path}:{lineno}: missing key {missing[0]!r}; each task needs {', '.join(required)}")
            rows.append((lineno, row))
    if not rows:
        raise ConfigError(f"{path}: no tasks; add one JSON object per line")
    return rows


class TaskFiles:
    """A domain's split -> JSONL map, each split read once into `Task`s.

    `fields(row, where)` turns one row into the domain's ``prompt``, ``answer``
    and ``meta`` (`where` is ``file:line`` for its errors); the id (``id`` or
    ``<split>-<index>``) and the stratum (``subset``, else ``stratum``, else
    ``all``) are the same for every domain.
    """

    def __init__(self, domain: str, train_file: str | None, validation_file: str | None, files: dict | None,
                 required: tuple[str, ...], fields: Callable[[dict, str], dict]):
        self.domain, self.required, self.fields = domain, required, fields
        self.paths = split_files(domain, train_file, validation_file, files)
        self._cache: dict[str, list[Task]] = {}

    def deny_read(self) -> tuple[str, ...]:
        """What sandboxed programs may not read: the task files and the shipped samples hold the answers."""
        return tuple(sorted({str(p) for p in self.paths.values()} | {str(shipped_dir(self.domain))}))

    def tasks(self, split: str) -> list[Task]:
        if split not in self.paths:
            raise ConfigError(f"recipe.yaml: eval.split: {split!r} is not a {self.domain} split; use one of "
                              f"{', '.join(sorted(self.paths))} or add it under domain.options.files")
        if split not in self._cache:
            path = self.paths[split]
            self._cache[split] = [
                Task(id=str(row.get("id") or f"{split}-{i:05d}"),
                     stratum=str(row.get("subset") or row.get("stratum") or "all"),
                     **self.fields(row, f"{path}:{lineno}"))
                for i, (lineno, row) in enumerate(read_jsonl(path, self.required))
            ]
        return list(self._cache[split])
