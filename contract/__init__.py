"""The ground floor: what the framework and an operator agree on, importing nothing of either.

* ``contract.operator``: an operator declared as data (dimensions, inputs, outputs and their
  kinds, its golden, gate, schedules, profiles, backends);
* ``contract.backend``: what a backend takes and returns, checked against a declaration;
* ``contract.schedule``: the protocol of a dtype path and loop schedule the goldens replay.
"""
