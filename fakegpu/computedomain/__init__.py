"""ComputeDomains: multi-node NVLink through IMEX, the way NVIDIA's DRA driver models them.

A controller turns each ComputeDomain into a channel ResourceClaimTemplate, a daemon claim
template and a DaemonSet of IMEX daemons; a second kubelet plugin (the compute-domain driver)
publishes IMEX channels and a daemon device per node, and prepares them; a fake IMEX daemon per
node and domain forms the domain over the pod network and reports it in the domain's status.
docs/gb200.md tells the whole story.
"""
