"""Machinery every method shares and a learner may skip: flags, models and FSDP2, engines,
metrics, a run's bookkeeping. Nothing here imports the methods or the CPU world."""
