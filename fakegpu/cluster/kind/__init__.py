"""Kind clusters without a registry: Docker on this host, node/plugin images, the provider."""
