"""Who acts: registered actors with Ed25519 keys and roles, the signed requests of their privileged actions, and
the checks that authorize them, online before anything changes and offline, years later, from the ledger's events
alone.

``requests`` is the signed request format, ``roles`` the roles and what each permits (the source of the
documentation's table), ``registry`` the actor registry as a value (and four-eyes between identities), ``verify``
the checks in order, ``authorize`` the gate that runs an action in the transaction of its event and records
refusals, ``admin`` the actor-management actions, ``offline`` the auditor's re-check from events and ``keyfiles``
an actor's own key file. The persistence is ledger/actors.py. ``requests``, ``roles``, ``registry``, ``verify`` and
``offline`` do not load the database layer, so an offline verifier can use them alone.
"""
