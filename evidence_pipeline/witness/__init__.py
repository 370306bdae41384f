"""An outside witness for the ledger's checkpoints (C2SP tlog-witness), and the log's side of talking to one.

state.py: a witness's durable record of the newest checkpoint it co-signed per log; server.py: `evidence witness
serve`, the `add-checkpoint` endpoint; client.py: the checkpointer's submissions, with catch-up from a witness's
own size. Nothing here reads the ledger database or the archive: the witness runs apart from both. The formats it
speaks (signed notes, checkpoints, cosignatures) are the ground module `signed_note.py`, which the configuration
and the offline verifier read too.
"""
