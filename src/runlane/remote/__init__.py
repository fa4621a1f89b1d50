"""Remote execution: steps and workflow turns executed by workers of a group, over a transport.

``dispatch`` is the engine's side of the wire (tasks out; results, heartbeats and decisions
in), ``steps`` the turn's side of a remote step (the driver a ``Turn`` gets from its host),
``turns`` a remote workflow's turns (sent to a worker, or decided in process) and the decisions
applied, ``tasks`` the workflow task and decision documents, ``replay`` a turn replayed into a
decision, and ``worker`` the ``Worker`` that executes them and never touches the store.
"""
