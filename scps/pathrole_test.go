package scps

import (
	"bytes"
	"testing"
	"time"

	"scpsvpn/scps/internal/wire"
)

// TestPathRoleLearned: the told side's probes on its backup say so
// (PATH_ROLE), and the side that learned its paths takes it; told nothing
// of it (a peer that does not take PATH_ROLE), the probes are a PING
// alone and every learned path stays a primary, as before.
func TestPathRoleLearned(t *testing.T) {
	for _, roles := range []bool{true, false} {
		s, _ := pathSim(t, true, 1<<20)
		s.a[0].cfg.PathRoles = roles
		var probes, withRole int
		s.observe = func(from int, pkt []byte) bool {
			if from == 0 && isPathProbe(pkt) {
				probes++
				if len(pkt) > 1 && pkt[1] == wire.FramePathRole {
					withRole++
					if !bytes.Equal(pkt, []byte{wire.FramePing, wire.FramePathRole, wire.PathRoleBackup}) {
						t.Errorf("a probe with a role: %x", pkt)
					}
				}
			}
			return false
		}
		s.runUntil(time.Second, func() bool { return false })
		if probes == 0 {
			t.Fatalf("roles %v: no probes from the told side", roles)
		}
		if got := pathOf(s.a[1], 1).Backup; got != roles {
			t.Errorf("roles %v: the learned side's path 1 is a backup: %v", roles, got)
		}
		if pathOf(s.a[1], 0).Backup {
			t.Errorf("roles %v: the learned side's path 0 is a backup", roles)
		}
		if withRole == 0 && roles || withRole != 0 && !roles {
			t.Errorf("roles %v: %d of %d probes carried PATH_ROLE", roles, withRole, probes)
		}
		// The learned side tells nothing: its paths have no role of its own.
		if p := pathOf(s.a[0], 1); !p.Backup {
			t.Errorf("the told side's backup %+v", p)
		}
	}
}

// TestLearnedBackupPrimaryStall: the GEO primary's way from the learned
// side (B, sending a download) stalls for a while, its modem holding what
// B sends, then delivering it all: B's packets on it go unacknowledged
// and B takes it down, while A's packets on it are acknowledged (B's
// answers to A's probes on the cellular backup carry the ACKs) and A
// keeps it. Told by A's probes which path is the backup, B sends no data
// on it meanwhile; before, B moved the data there each time its GEO
// looked down (hundreds of kB on a metered link while the GEO worked).
func TestLearnedBackupPrimaryStall(t *testing.T) {
	for _, hold := range []time.Duration{500 * time.Millisecond, 1200 * time.Millisecond} {
		t.Run(hold.String(), func(t *testing.T) {
			s, st := twoLinkSim(t, [2]bondLink{bondGEO, bondCell}, true, 3*time.Second)
			s.runUntil(13*time.Second, func() bool { return false })
			if p := pathOf(s.a[1], 1); !p.Backup || p.DataBytesSent != 0 {
				t.Fatalf("B's path over the backup before the stall: %+v: want it known for a backup, no data on it", p)
			}
			downsB := pathOf(s.a[1], 0).Downs
			s.dir[1].p.HoldFrom, s.dir[1].p.HoldUntil = s.now, s.now+hold
			before := st.received
			s.runUntil(s.now+6*time.Second, func() bool { return false })
			geoA, geoB, cellB := pathOf(s.a[0], 0), pathOf(s.a[1], 0), pathOf(s.a[1], 1)
			t.Logf("B's GEO went down %d times; B's backup: %d data bytes; A's GEO downs %d", geoB.Downs-downsB, cellB.DataBytesSent, geoA.Downs)
			if geoB.Downs == downsB {
				t.Errorf("B never took its GEO down: the stall tests nothing (make it longer)")
			}
			if geoA.Downs != 0 {
				t.Errorf("A took its GEO down %d times: the primary worked from A's side", geoA.Downs)
			}
			if cellB.DataBytesSent != 0 {
				t.Errorf("B sent %d data bytes on the backup while the GEO delivered", cellB.DataBytesSent)
			}
			if p := pathOf(s.a[0], 1); p.DataBytesSent != 0 {
				t.Errorf("A sent %d data bytes on the backup", p.DataBytesSent)
			}
			if !geoB.Up || !geoB.Active || st.received-before < 2<<20 {
				t.Errorf("after the stall: B's GEO %+v, %d bytes in 6 s: want it carrying the download again", geoB, st.received-before)
			}
			if st.resetErr != nil || st.closeErr != nil {
				t.Fatalf("stream: reset %v, close %v", st.resetErr, st.closeErr)
			}
		})
	}
}

// TestLearnedBackupOneWay: the GEO primary's way from the learned side
// dies while the way to it keeps working: A still hears B's answers on
// the backup, its GEO stays up and it does not move to the backup, so B
// cannot follow it there; B sends on the backup once none of A's
// primaries has been up at B for learnedBackupWait, and the download goes
// on.
func TestLearnedBackupOneWay(t *testing.T) {
	s, st := twoLinkSim(t, [2]bondLink{bondGEO, bondCell}, true, 3*time.Second)
	s.runUntil(13*time.Second, func() bool { return false })
	s.dir[1].p.Down = true
	_, longest := stallsAfter(s, st, s.now+10*time.Second)
	cellB := pathOf(s.a[1], 1)
	t.Logf("longest stall %v; B's backup %d data bytes", longest, cellB.DataBytesSent)
	if !cellB.Active || cellB.DataBytesSent == 0 {
		t.Errorf("B's backup %+v: want it carrying the download", cellB)
	}
	if longest > 6*time.Second {
		t.Errorf("the download stalled %v: want B on the backup within a few seconds", longest)
	}
	if st.resetErr != nil || st.closeErr != nil {
		t.Fatalf("stream: reset %v, close %v", st.resetErr, st.closeErr)
	}
}
