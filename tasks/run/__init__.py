"""The run machinery of `train.py`, one module a job:

- `precision`: the training precision of a run that sets none;
- `checkpoints`: the newest training state (exact resume) and the best checkpoint;
- `checkpoint_io`: atomic checkpoint files, read without unpickling code;
- `signals`: stopping on SIGTERM, SIGINT and SLURM's requeue signal;
- `tracking`: Weights & Biases, the saved config, attention maps;
- `throughput`: tokens/s and MFU during training;
- `compile`: `torch.compile` of the encoder, as an option;
- `sweep`: all of GLUE from one checkpoint (`python -m tasks.run.sweep`).
"""
