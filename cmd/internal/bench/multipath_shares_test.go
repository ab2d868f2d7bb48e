package bench

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/scps"
	"scpsvpn/tunnel"
)

// TestSharesCarryRTT: each path's share names its link by A's address
// and carries its smoothed and least RTT, the queue a request there
// waits behind.
func TestSharesCarryRTT(t *testing.T) {
	tb := &testbed.Testbed{A: &testbed.Site{
		Underlay:  netip.MustParsePrefix("10.200.0.1/24"),
		Underlay2: netip.MustParsePrefix("10.201.0.1/24"),
	}}
	c := Condition{Name: "GEO+CELL", Second: &Condition{Name: "CELL"}}
	paths := []tunnel.PathStatus{
		{PathStats: scps.PathStats{DataBytesSent: 300, SRTT: 620 * time.Millisecond, MinRTT: 600 * time.Millisecond}, Endpoint: "10.200.0.1:4700"},
		{PathStats: scps.PathStats{DataBytesSent: 700, SRTT: 66500 * time.Microsecond, MinRTT: 61 * time.Millisecond}, Endpoint: "10.201.0.1:4700"},
	}
	got := shares(tb, c, paths)
	if len(got) != 2 || got[0].Link != "GEO" || got[1].Link != "CELL" {
		t.Fatalf("shares %+v: want GEO then CELL", got)
	}
	if got[1].SRTTMs != 66.5 || got[1].MinRTTMs != 61 || got[0].SRTTMs != 620 || got[1].Share != 0.7 {
		t.Errorf("shares %+v: want the cellular path's srtt 66.5 ms, min 61 ms, share 0.7", got)
	}
}

// TestRequestAgainstIdleRTT: the request beside the bulk is reported
// against the fast link's configured RTT and against the fast path's RTT
// as the same request measured it with the links idle (the hosts' few
// milliseconds included), both in the summary line and in the table.
func TestRequestAgainstIdleRTT(t *testing.T) {
	m := &MultipathResult{FastRTTMs: 40, P50Ms: 46, P95Ms: 51, IdleRequests: 20, IdleP50Ms: 44.5, IdleP95Ms: 46}
	ofLink, ofIdle := m.RequestRatios()
	if ofLink != 51.0/40 || ofIdle != 51/44.5 {
		t.Errorf("ratios %v, %v: want %v of the link's RTT, %v of the idle path's", ofLink, ofIdle, 51.0/40, 51/44.5)
	}
	if _, ofIdle := (&MultipathResult{FastRTTMs: 40, P95Ms: 51}).RequestRatios(); ofIdle != 0 {
		t.Errorf("no idle requests: ratio %v, want 0", ofIdle)
	}
	r := &Result{Condition: "LEO+GEO", Contender: "scpsvpn", Status: StatusOK, Multipath: m}
	sum := multipathSummary(r)
	for _, want := range []string{"p95 1.27x the fast link's RTT 40 ms", "1.15x the fast path's idle RTT 44.5 ms"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary %q: want %q", sum, want)
		}
	}
	var b strings.Builder
	rep := &Report{Conditions: []ConditionInfo{{Name: "LEO+GEO"}}, Contenders: []ContenderInfo{{Name: "scpsvpn"}}, Results: []*Result{r}}
	rep.renderMultipath(&b)
	var header, sep, row string
	for _, l := range strings.Split(b.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "| condition"):
			header = l
		case strings.HasPrefix(l, "|---"):
			sep = l
		case strings.HasPrefix(l, "| LEO+GEO"):
			row = l
		}
	}
	if n := strings.Count(header, "|"); n != strings.Count(sep, "|") || n != strings.Count(row, "|") {
		t.Errorf("table columns differ:\n%s\n%s\n%s", header, sep, row)
	}
	if !strings.Contains(row, "| 44.5 / 46.0 | 1.27x | 1.15x |") {
		t.Errorf("row %q: want the idle RTT and both ratios", row)
	}
}
