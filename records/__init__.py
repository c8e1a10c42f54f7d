"""The records that cross a process or a file, each the one owner of its file's shape.

`test` (test.json: what ran), `results` (results.json: the verdict), `matrix` (matrix.json: a
matrix's rows and their runs), `history` (a history.jsonl line and an event log's line), `schedule`
(schedule.json: a run's fault schedule), `shard` (shard.json: one shard of a matrix). Each is
a msgspec Struct with its format version, `encode`, `decode` (strict: a field of the wrong type
is a `RecordError` naming the file and the field) and its JSON Schema generated from the type.
The bottom package: it imports no other package of the project, and every package may import it.
"""
