"""Errors raised by library code. Only `evo.cli` turns them into messages.

Every message is one line that names the file / field / value at fault and the
fix, e.g. ``recipe.yaml: grpo.num_generations: 1 is below the minimum 2; set it to 2 or more``.
"""


class EvoError(Exception):
    """Base class for every error EvoTrainer reports to a user."""


class ConfigError(EvoError):
    """A YAML file is malformed or violates its schema."""


class WorkspaceError(EvoError):
    """The folder is not a workspace, is dirty where that matters, or is locked."""


class LockedError(WorkspaceError):
    """Another writer holds the workspace lock."""


class VersionError(EvoError):
    """An unknown version, or an operation that does not apply to its state."""


class LineageError(EvoError):
    """A lineage note is missing, malformed, or fails its schema."""


class TrainError(EvoError):
    """Training, generation or evaluation failed."""


class HarnessError(EvoError):
    """The diagnostic harness could not run (a broken analyzer is a finding, not this)."""


class SandboxUnavailable(EvoError):
    """bubblewrap is missing or cannot create the namespaces a jail needs on this machine."""


class AgentError(EvoError):
    """A trainer agent failed or produced an invalid candidate."""


class MissingDependencyError(EvoError):
    """An optional extra (vllm, deepspeed, claude-agent-sdk, ...) is not installed."""

    def __init__(self, package: str, extra: str, purpose: str):
        super().__init__(
            f"{purpose} needs the optional package '{package}'; install it with "
            f"`pip install 'evotrainer[{extra}]'`"
        )
        self.package = package
        self.extra = extra
