"""The NIC DRA driver nic.fakegpu.dev (docs/nics.md)."""
