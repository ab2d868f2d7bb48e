package bench

// This file owns the contenders: kernel TCP with a named congestion control
// end to end over the emulated link, and scpsvpn with each congestion
// controller its [peer.link] table can name. The list of scpsvpn modes comes
// from the configs package, so a controller added there is benchmarked too.

import (
	"fmt"
	"strings"

	"scpsvpn/configs"
)

// Kernel TCP congestion controls the benchmark compares against.
var KernelAlgorithms = []string{"reno", "cubic", "bbr"}

// scpsPrefix starts the names of scpsvpn contenders: scpsvpn-<mode>.
const scpsPrefix = "scpsvpn-"

// Contender is one way of carrying the download.
type Contender struct {
	Name string // "cubic", "scpsvpn-hybrid", "scpsvpn" (the endpoint's default)
	// Kernel is the TCP_CONGESTION of both end-to-end sockets; empty for
	// an scpsvpn contender.
	Kernel string
	// Congestion is the [peer.link] congestion of an scpsvpn contender;
	// empty = the key is left out and the endpoint's default applies.
	Congestion string
	// Share makes the contender a shared-bottleneck workload (share.go):
	// two downloads over the same link, the second started shareLag after
	// the first.
	Share Share
	// Beside is the kernel TCP congestion control of the flow beside the
	// tunnel in a ShareKernel workload.
	Beside string
}

// IsSCPS reports whether the contender runs through the scpsvpn endpoints.
func (c Contender) IsSCPS() bool { return c.Kernel == "" }

// Label is the contender's name for people: "kernel TCP cubic",
// "scpsvpn (hybrid)".
func (c Contender) Label() string {
	switch {
	case c.Share == ShareSites:
		return "two scpsvpn associations (" + DefaultCongestion() + ")"
	case c.Share == ShareKernel:
		return "scpsvpn (" + DefaultCongestion() + ") beside kernel TCP " + c.Beside
	case !c.IsSCPS():
		return "kernel TCP " + c.Kernel
	case c.Congestion == "":
		return "scpsvpn (" + DefaultCongestion() + ", default)"
	default:
		return "scpsvpn (" + c.Congestion + ")"
	}
}

// DefaultCongestion is the controller an endpoint uses when its
// [peer.link] names none.
func DefaultCongestion() string { return configs.CongestionModes[0] }

// KernelContender returns the kernel TCP contender of algo.
func KernelContender(algo string) Contender { return Contender{Name: algo, Kernel: algo} }

// SCPSContender returns the scpsvpn contender of a congestion mode; ""
// leaves the choice to the endpoint.
func SCPSContender(mode string) Contender {
	if mode == "" {
		return Contender{Name: "scpsvpn"}
	}
	return Contender{Name: scpsPrefix + mode, Congestion: mode}
}

// AllContenders lists every contender: the kernel ones, then scpsvpn with
// each congestion mode.
func AllContenders() []Contender {
	var out []Contender
	for _, a := range KernelAlgorithms {
		out = append(out, KernelContender(a))
	}
	for _, m := range configs.CongestionModes {
		out = append(out, SCPSContender(m))
	}
	return out
}

// ContenderNames lists the names SelectContenders accepts (besides "all",
// "kernel", "scpsvpn-all" and "share-all").
func ContenderNames() []string {
	var names []string
	for _, c := range AllContenders() {
		names = append(names, c.Name)
	}
	names = append(names, "scpsvpn")
	for _, c := range ShareContenders() {
		names = append(names, c.Name)
	}
	return names
}

// SelectContenders parses a comma-separated list of contender names ("" or
// "all" = every one but the shared-link workloads; "kernel" = the kernel
// ones; "scpsvpn-all" = every scpsvpn mode; "scpsvpn" = the endpoint's
// default mode; "share-all" = every shared-link workload). Unknown kernel
// algorithms are allowed as "tcp-NAME", so a kernel with e.g. hybla can be
// compared too. Order is kept, duplicates dropped.
func SelectContenders(list string) ([]Contender, error) {
	if t := strings.TrimSpace(list); t == "" || strings.EqualFold(t, "all") {
		return AllContenders(), nil
	}
	var out []Contender
	seen := map[string]bool{}
	add := func(c Contender) {
		if !seen[c.Name] {
			seen[c.Name] = true
			out = append(out, c)
		}
	}
	for item := range strings.SplitSeq(list, ",") {
		item = strings.ToLower(strings.TrimSpace(item))
		switch {
		case item == "":
		case item == "kernel":
			for _, a := range KernelAlgorithms {
				add(KernelContender(a))
			}
		case item == "scpsvpn-all":
			for _, m := range configs.CongestionModes {
				add(SCPSContender(m))
			}
		case item == "scpsvpn":
			add(SCPSContender(""))
		case item == "share-all":
			for _, c := range ShareContenders() {
				add(c)
			}
		case strings.HasPrefix(item, sharePrefix):
			c, ok := shareContender(item)
			if !ok {
				return nil, fmt.Errorf("unknown shared-link workload %q: use one of %s or share-all", item, strings.Join(shareNames(), ", "))
			}
			add(c)
		case strings.HasPrefix(item, scpsPrefix):
			mode := strings.TrimPrefix(item, scpsPrefix)
			if !contains(configs.CongestionModes, mode) {
				return nil, fmt.Errorf("unknown scpsvpn congestion mode %q in contender %q: use one of %s", mode, item, strings.Join(configs.CongestionModes, ", "))
			}
			add(SCPSContender(mode))
		case contains(KernelAlgorithms, item):
			add(KernelContender(item))
		case strings.HasPrefix(item, "tcp-") && validAlgo(strings.TrimPrefix(item, "tcp-")):
			add(Contender{Name: item, Kernel: strings.TrimPrefix(item, "tcp-")})
		default:
			return nil, fmt.Errorf("unknown contender %q: use %s, kernel, scpsvpn-all, share-all, tcp-<kernel algorithm> or all", item, strings.Join(ContenderNames(), ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no contender selected: use %s or all", strings.Join(ContenderNames(), ", "))
	}
	return out, nil
}

// validAlgo accepts names a kernel could register (TCP_CA_NAME_MAX is 16).
func validAlgo(s string) bool {
	if s == "" || len(s) >= 16 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
