"""Signed webhooks to tenants (Standard Webhooks): a tenant's endpoint and secrets, set and rotated as an operator's
signed actions (subscriptions.py); the signature (signing.py); which hosts a delivery may reach (targets.py); one
HTTP attempt pinned to the address that was checked (sender.py); and the deliverer that drains the ledger's outbox
with capped, jittered exponential backoff until a delivery is delivered or dead (delivery.py). What is announced,
and when, is the ledger's (ledger/outbox.py): a delivery exists only for an event that committed."""
