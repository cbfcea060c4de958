"""The context stages as pure, synchronous functions (SPEC sections 4 and 5).

Stages never touch the network, the store, metrics or threads: messages and a ``Scope`` in, one
frozen result out. The summary call is the service's (``proxy.context.summary.compaction``);
spills are handed back for the service to store; every function returns new lists.
"""
