"""What every fakegpu DRA kubelet plugin does, whatever its devices: registration, the DRA
gRPC service (v1, v1beta1), per-claim records, CDI spec files, claim status, slice publishing.

The GPU plugin (``fakegpu.plugin``), the NIC plugin (``fakegpu.nic``) and the compute-domain
plugin sit on it; each keeps only what is particular to its devices.
"""
