"""EvoTrainer: co-evolve LLM policies and the training harness that judges them.

A workspace is a git repository; each policy version is a branch; lineage lives
in git notes. See DESIGN.md for the architecture and docs/contracts.md for the
data formats shared between the layers.
"""

__version__ = "0.1.0"
