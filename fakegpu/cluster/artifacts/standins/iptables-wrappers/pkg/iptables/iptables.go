// Package iptables is fakegpu's stand-in for sigs.k8s.io/iptables-wrappers/pkg/iptables.
//
// Kubernetes 1.38's kubelet imports that module only to create its KUBE-IPTABLES-HINT and
// KUBE-FIREWALL chains, for the benefit of other components; the Go module proxy does not serve
// the module, so the kubelet cannot be built from the proxy without a replacement. This one
// declares the names the kubelet compiles against and finds no iptables: NewBestEffort returns
// no clients, so the kubelet takes its own "No iptables support on this system" path, as on a
// host with nftables only. Nothing of a fakegpu cluster uses those chains (its pod network is
// CNI bridges). Written from the kubelet's call sites; no code of the real module is here.
package iptables

import (
	"context"
	"time"
)

// Chain, Table, Protocol and RulePosition are iptables names, as the kubelet spells them.
type (
	Chain        string
	Table        string
	Protocol     string
	RulePosition string
)

// Tables and chains the kubelet names.
const (
	TableMangle Table = "mangle"
	TableNAT    Table = "nat"
	TableFilter Table = "filter"

	ChainInput  Chain = "INPUT"
	ChainOutput Chain = "OUTPUT"

	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"
)

// Mode says which iptables binaries to use; the stand-in has none to choose from.
type Mode int

// UseInstalledMode is the mode the kubelet asks for.
const UseInstalledMode Mode = 0

// Interface is the part of an iptables client the kubelet calls.
type Interface interface {
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	Protocol() Protocol
	IsIPv6() bool
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

// NewBestEffort returns a client per IP family that has a working iptables: none here.
func NewBestEffort(ctx context.Context, mode Mode) map[Protocol]Interface {
	return map[Protocol]Interface{}
}
