"""The reconciler: folds each audit's events, judges them by the rules, and appends its
decisions exactly once.

- :mod:`.component`: the log consumer (folding, judging, partition assignment);
- :mod:`.log`: its view of the log (what it folds, what it passes over);
- :mod:`.judgments`: the rules applied to a folded audit, and the decisions they make;
- :mod:`.commits`: a batch's decisions committed while the next batch is judged;
- :mod:`.counting`: the decisions' metrics.
"""

from consumers.components.reconciler.component import Reconciler

__all__ = ["Reconciler"]
