// A stand-in for sigs.k8s.io/iptables-wrappers, which the Go module proxy does not serve
// (403) while Kubernetes 1.38's kubelet imports it. Written for fakegpu: see iptables.go.
module sigs.k8s.io/iptables-wrappers

go 1.24
