"""The run directory: its layout and the name of each file (:mod:`~transformer.run.layout`),
reading and writing a run's model (:mod:`~transformer.run.model`), run configuration
(:mod:`~transformer.run.config`), metrics (:mod:`~transformer.run.metrics`), alignment snapshots
(:mod:`~transformer.run.alignments`) and checkpoints (:mod:`~transformer.run.checkpoints`), which
run a directory holds (:mod:`~transformer.run.directory`), and its one writer's lock
(:mod:`~transformer.run.lock`).

Training writes a run directory; translating, serving, exporting and reporting read it. Both
import this package, and it imports neither.
"""
