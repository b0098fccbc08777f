"""The bandwidth job of issue 12: a simulated ``nvbandwidth`` (``csrc/nvbandwidth.c``, static,
in the workload image), its MPI-style launcher, the rules it applies (``model.py``) and the
heatmap of its results (``report.py``). docs/gb200.md describes them."""
