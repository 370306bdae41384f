"""An outside witness for the ledger's checkpoints (C2SP tlog-witness), and the log's side of talking to one.

note.py: C2SP signed notes, checkpoints and Ed25519 cosignatures (signed-note, tlog-checkpoint, tlog-cosignature);
state.py: a witness's durable record of the newest checkpoint it co-signed per log; server.py: `evidence witness
serve`, the `add-checkpoint` endpoint; client.py: the checkpointer's submissions, with catch-up from a witness's
own size. Nothing here reads the ledger database or the archive: the witness runs apart from both.
"""
