"""Chaos: two ``auditrec serve`` processes under SIGKILLs and service restarts, then a verdict.

- :mod:`.profile`: the run's size from the environment (a short profile in ``make test``,
  ``make chaos`` sets a long one);
- :mod:`.plan`: the audits, what the simulator says about each and the outcome each must end
  with; the marker audits that time each recovery;
- :mod:`.processes`: the serve slots (kill, restart under the same identity) and the service
  restarts of ``scripts/services.sh``;
- :mod:`.verdict`: reading the log and the table back, the rebuild, the figures and their
  summary.
"""
