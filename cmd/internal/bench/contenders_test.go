package bench

import (
	"strings"
	"testing"

	"scpsvpn/configs"
)

func TestSelectContenders(t *testing.T) {
	all := AllContenders()
	if len(all) != len(KernelAlgorithms)+len(configs.CongestionModes) {
		t.Fatalf("AllContenders = %v", all)
	}
	names := func(cs []Contender) string {
		var n []string
		for _, c := range cs {
			n = append(n, c.Name)
		}
		return strings.Join(n, ",")
	}
	for _, tc := range []struct{ in, want string }{
		{"", names(all)},
		{"all", names(all)},
		{"cubic", "cubic"},
		{"Cubic, scpsvpn-vj,cubic", "cubic,scpsvpn-vj"},
		{"kernel", "reno,cubic,bbr"},
		{"scpsvpn-all", "scpsvpn-" + strings.Join(configs.CongestionModes, ",scpsvpn-")},
		{"scpsvpn", "scpsvpn"},
		{"tcp-hybla", "tcp-hybla"},
		{"vegas", ""},         // a kernel name the list does not know, without tcp-
		{"scpsvpn-bogus", ""}, // not a mode the config accepts
		{"tcp-", ""},
		{"tcp-Bad/Name", ""},
		{",", ""},
	} {
		got, err := SelectContenders(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("SelectContenders(%q) = %v, want an error", tc.in, names(got))
			}
			continue
		}
		if err != nil {
			t.Errorf("SelectContenders(%q): %v", tc.in, err)
			continue
		}
		if names(got) != tc.want {
			t.Errorf("SelectContenders(%q) = %s, want %s", tc.in, names(got), tc.want)
		}
	}
}

func TestContenderKinds(t *testing.T) {
	cs, err := SelectContenders("bbr,scpsvpn-rate,scpsvpn,tcp-hybla")
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].IsSCPS() || cs[0].Kernel != "bbr" || cs[0].Label() != "kernel TCP bbr" {
		t.Errorf("bbr: %+v %q", cs[0], cs[0].Label())
	}
	if !cs[1].IsSCPS() || cs[1].Congestion != "rate" || cs[1].Label() != "scpsvpn (rate)" {
		t.Errorf("scpsvpn-rate: %+v %q", cs[1], cs[1].Label())
	}
	if !cs[2].IsSCPS() || cs[2].Congestion != "" || !strings.Contains(cs[2].Label(), DefaultCongestion()) {
		t.Errorf("scpsvpn: %+v %q", cs[2], cs[2].Label())
	}
	if cs[3].IsSCPS() || cs[3].Kernel != "hybla" {
		t.Errorf("tcp-hybla: %+v", cs[3])
	}
}
