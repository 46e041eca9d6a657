"""The `evo` command. Only this package prints; library code raises EvoError.

Commands live in one module per area (workspace, train, harness, loop), each
exposing `register(group)`. Command modules import heavy libraries (torch,
transformers, pyarrow) inside the command body, so `evo status` stays fast.
"""

from __future__ import annotations

import importlib
import sys

import click

from evo.errors import EvoError

_COMMAND_MODULES = ("workspace", "train", "harness", "agent", "loop", "report")


class EvoGroup(click.Group):
    """Turns EvoError into a one-line `error: ...` and exit status 1.

    A git command failing where library code did not expect it is also one
    line (git's own first line and `evo fsck`), not GitPython's multi-line dump.
    """

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except EvoError as exc:
            raise click.ClickException(str(exc)) from None
        except Exception as exc:
            git_error = _git_error_line(exc)
            if git_error is None:
                raise
            raise click.ClickException(git_error) from None
        except KeyboardInterrupt:
            click.echo("interrupted; the run can be resumed by running the same command again", err=True)
            sys.exit(130)

    def main(self, *args, **kwargs):
        """Run the command; as one rank of an outside torchrun, end the process the way a rank must."""
        try:
            return super().main(*args, **kwargs)
        except SystemExit as exc:
            ranks = sys.modules.get("evo.train.distributed")  # imported only by commands that train or evaluate
            if ranks is not None and ranks.joined():
                ranks.end_rank(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
            raise


def _git_error_line(exc: Exception) -> str | None:
    import git

    if not isinstance(exc, git.GitCommandError):
        return None
    from evo.lineage.gitio import first_line

    command = " ".join(str(part) for part in (exc.command or [])[:3]) if isinstance(exc.command, list) else str(exc.command)
    return f"`{command}` failed: {first_line(exc)}; run `evo fsck` to check the workspace"


@click.group(cls=EvoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evotrainer", prog_name="evo")
def main():
    """EvoTrainer: train LLM policies with GRPO and evolve the harness that judges them.

    Start with `evo init`, then `evo step`. Every read command takes --json.
    """


for _name in _COMMAND_MODULES:
    importlib.import_module(f"evo.cli.{_name}").register(main)
