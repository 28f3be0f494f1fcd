"""The round layer: the two pipelines of a round, shared by the synchronous and the asynchronous
driver, and the `Stages` record of a run's stages (`stages.py`). It may import the stages layer
and every layer below it, never a driver, a run or the CLI.

client (`client.py`): decode download → the engine trains → the algorithm's upload → the upload
stages in order (`fedlight.stages.base`: selection's report, an attack, privacy's clip, the
wire's codecs)
server (`server.py`): decode in reverse → aggregate the split parts (a stage may replace the
aggregation) → the algorithm's server update → the stages' round end in reverse

The drivers (`fedlight.drivers.synchronous`, `fedlight.drivers.asynchronous`) only schedule:
whom, when, on which worker; a new kind of stage is one `UploadStage` and never changes them.
"""
