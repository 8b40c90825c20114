"""The host layer: SSH sessions, fact batches, the read-only HostReader, parallelism."""
