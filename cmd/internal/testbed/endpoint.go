package testbed

// This file owns the two-site testbed's endpoint processes (procs, see
// proc.go): starting side's, stopping it, its PID, resident memory and log.

import (
	"errors"
	"fmt"
	"github.com/vishvananda/netlink"
	"os"
)

// procSite describes side's slot for the shared endpoint code.
func (tb *Testbed) procSite(i int) procSite {
	side := Side(i)
	s := tb.Site(side)
	return procSite{name: side.String(), ref: side.String(), logKey: "side", logVal: side,
		ns: s.NS, tun: s.TUNName, configFile: s.ConfigFile, logFile: s.LogFile}
}

// StartEndpoint starts side's endpoint and returns once its TUN device is
// up in the site's namespace.
func (tb *Testbed) StartEndpoint(side Side) error {
	if tb.cfg.Binary == "" {
		return errors.New("testbed: no endpoint binary configured (Config.Binary)")
	}
	if tb.Site(side) == nil {
		return fmt.Errorf("testbed: no %s: the second pair of sites needs Config.SecondPair", side)
	}
	return tb.start(int(side), tb.cfg.Binary)
}

// StopEndpoint sends sig to side's endpoint and waits for it to exit;
// after Config.StopTimeout it is killed and an error says so. The exit code
// follows the shell: 128+n when the process died of signal n.
func (tb *Testbed) StopEndpoint(side Side, sig os.Signal) (int, error) {
	return tb.stop(int(side), sig)
}

// PID returns the endpoint's process id, 0 when it is not running.
func (tb *Testbed) PID(side Side) int { return tb.pid(int(side)) }

// RSS returns the endpoint's resident set size in bytes (VmRSS).
func (tb *Testbed) RSS(side Side) (int64, error) {
	pid := tb.PID(side)
	if pid == 0 {
		return 0, fmt.Errorf("testbed: %s: %w", side, ErrNotRunning)
	}
	return rssOf(pid)
}

// CPUSeconds returns the CPU time (user and system) the endpoint has used.
func (tb *Testbed) CPUSeconds(side Side) (float64, error) {
	pid := tb.PID(side)
	if pid == 0 {
		return 0, fmt.Errorf("testbed: %s: %w", side, ErrNotRunning)
	}
	return cpuSecondsOf(pid)
}

// TUNQueue is the state of an endpoint's TUN device's transmit queue: the
// packets on their way from the kernel into the endpoint.
type TUNQueue struct {
	Len     int    // txqueuelen, in packets
	Dropped uint64 // dropped because the queue was full: the endpoint did not read fast enough
}

// TUNQueue reads side's endpoint TUN device's transmit queue.
func (tb *Testbed) TUNQueue(side Side) (TUNQueue, error) {
	var q TUNQueue
	err := tb.Do(side, func() error {
		l, err := netlink.LinkByName(tb.Site(side).TUNName)
		if err != nil {
			return fmt.Errorf("testbed: %s TUN: %w", side, err)
		}
		q.Len = l.Attrs().TxQLen
		if st := l.Attrs().Statistics; st != nil {
			q.Dropped = st.TxDropped
		}
		return nil
	})
	return q, err
}

// LogTail returns the last n lines of side's endpoint log.
func (tb *Testbed) LogTail(side Side, n int) string {
	return logTail(tb.Site(side).LogFile, n)
}

// TB is the part of testing.TB the log helpers use.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Failed() bool
	Cleanup(func())
}

// DumpLogsOnFailure logs both endpoint logs through t if the test failed,
// before Close removes them, whether Close runs from a defer or a cleanup.
func (tb *Testbed) DumpLogsOnFailure(t TB) {
	t.Helper()
	tb.dumpLogsOnFailure(t)
}
