"""What fakegpu builds or fetches for a cluster: Kubernetes binaries (cache, downloads, Go
builds), container images and OCI archives, KWOK. Shared by both providers."""
