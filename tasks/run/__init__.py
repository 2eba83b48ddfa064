"""The run machinery of `train.py`, one module a job:

- `cli`: the command line (LightningCLI over the task, datamodule and Trainer) and litbert's default callbacks;
- `configs`: `--config` files, their `base:` includes and nested nulls;
- `folders`: the run folder, `--overwrite`, and a run never destroying its own input;
- `precision`: the training precision of a run that sets none;
- `checkpoints`: the newest training state (exact resume) and the best checkpoint;
- `checkpoint_io`: atomic checkpoint files, read without unpickling code;
- `fsdp`: the FSDP strategy, wrapping the task once per run;
- `early_stopping`: stopping once the task's metric stops improving (`--early_stopping.patience`);
- `signals`: stopping on SIGTERM, SIGINT and SLURM's requeue signal;
- `agreement`: what every rank decides alike at a step boundary, agreed over the hosts;
- `timer`: `trainer.max_time`, its stop agreed over the hosts;
- `tracking`: Weights & Biases, the saved config, attention maps;
- `throughput`: tokens/s, samples/s and MFU during training;
- `progress`: the progress bar;
- `compile`: `torch.compile` of the encoder, and CUDA graphs, as options;
- `export`: the trained model saved with `save_pretrained`;
- `publish`: its model card, and its push to the Hugging Face Hub (`--push_to_hub`);
- `predict`: the unlabelled test sets predicted into submission files;
- `results`: metrics.json and the closing lines of a run;
- `errors`: messages and exit statuses of runs that do not finish;
- `sweep`: all of GLUE from one checkpoint (`python -m tasks.run.sweep`).
"""
