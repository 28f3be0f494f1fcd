"""The two pipelines of a round, shared by the synchronous and the asynchronous driver.

client (`client.py`): decode download → the engine trains → the algorithm's upload → the upload
stages in order (`stage.py`: selection's report, an attack, privacy's clip, the wire's codecs)
server (`server.py`): decode in reverse → aggregate the split parts (a stage may replace the
aggregation) → the algorithm's server update → the stages' round end in reverse

The drivers (`fedlight.loop`, `fedlight.asynchronous`) only schedule: whom, when, on which
worker; a new kind of stage is one `UploadStage` and never changes them.
"""
