"""Collection stage: workloads, hardware registry, measurement backends, the measurement-row schema."""
