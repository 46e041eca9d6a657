"""The diagnostic harness: analyzers, audits, paired statistics, outcome classes, backtests.

    from evo.harness.diagnose import diagnose        # run analyzers -> diagnosis.json + diagnosis.md
    from evo.harness.compare import compare_runs     # paired bootstrap + Wilcoxon + outcome class
    from evo.harness.backtest import backtest        # replay stored rollouts under a reward/filter change
    from evo.harness import kit                      # helpers for analyzer authors

docs/harness.md documents the analyzer contract, the built-ins and the outcome rules.
"""
