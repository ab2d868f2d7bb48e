package bench

import (
	"net/netip"
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
