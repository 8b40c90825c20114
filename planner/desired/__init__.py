"""The desired engine config files of each host, rendered from the cluster config."""
