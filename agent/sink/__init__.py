"""The sink: an S3-compatible object store the node puts a run's outputs in by itself.

The operator's laptop is no durable place for results: it sleeps, travels, dies. With a
pool `sink`, the node uploads the declared outputs straight to the store — at collection,
every `sync_every_s` while `run` runs, and before it gives itself up — and writes the
run's `manifest.json` last, so a manifest that says `complete` vouches for every file.

  layout.py    where a run's objects go, and the manifest's shape
  store.py     an obstore S3 client from a SinkTarget; store errors as one line
  upload.py    node → store: changed files only, verified, retried, then the manifest
  download.py  store → a directory: files checked against the manifest's SHA-256

Both sides use these modules: the node to upload and to seed a next attempt's workdir,
the operator (engine/sink/) to land outputs and for `swjob pull`.
"""
