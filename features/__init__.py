"""Feature stage: turn workload descriptions (+ hardware names) into model inputs."""
