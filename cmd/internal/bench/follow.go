package bench

// This file owns the datagrams that must follow a failover (the multipath
// workload): a ping and a UDP echo every followEvery from A to B's tunnel
// address across the cut, each reply's arrival noted.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"scpsvpn/cmd/internal/testbed"
)

const (
	followEvery = 100 * time.Millisecond
	// followAfter is how long the echoes go on after the cut: the
	// failover's wait and a margin.
	followAfter = 3 * time.Second
)

// replies are the arrival times of one kind of echo reply.
type replies struct {
	mu  sync.Mutex
	at  []time.Time
	end time.Time // when the echoes stopped
}

func (r *replies) add(t time.Time) {
	r.mu.Lock()
	r.at = append(r.at, t)
	r.mu.Unlock()
}

// stallFrom is the longest time without a reply from t0 to the end of
// the echoes (in ms), and how many replies came after t0.
func (r *replies) stallFrom(t0 time.Time) (ms float64, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gap time.Duration
	last := t0
	for _, at := range r.at {
		if at.Before(t0) {
			continue
		}
		n++
		gap = max(gap, at.Sub(last))
		last = at
	}
	if r.end.After(last) {
		gap = max(gap, r.end.Sub(last))
	}
	return float64(gap) / float64(time.Millisecond), n
}

// follower runs the echoes until stop.
type follower struct {
	ping, udp replies
	cmd       *exec.Cmd
	conn      net.Conn
	echo      net.PacketConn
	wg        sync.WaitGroup
	done      chan struct{}
	mu        sync.Mutex
	errs      []string
	once      sync.Once
}

func (f *follower) fail(what string, err error) {
	f.mu.Lock()
	f.errs = append(f.errs, what+": "+oneLine(err.Error()))
	f.mu.Unlock()
}

// err is what went wrong with the echoes themselves, if anything.
func (f *follower) err() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.errs, "; ")
}

// startFollow starts a ping and a UDP echo from A to B's tunnel address.
func startFollow(ctx context.Context, tb *testbed.Testbed) (*follower, error) {
	f := &follower{done: make(chan struct{})}
	dst := tb.B.TUN4.String()
	echo, err := tb.ListenPacket(testbed.B, "udp4", net.JoinHostPort(dst, "0"))
	if err != nil {
		return nil, fmt.Errorf("udp echo: %w", err)
	}
	conn, err := tb.DialContext(ctx, testbed.A, "udp4", echo.LocalAddr().String())
	if err != nil {
		echo.Close()
		return nil, fmt.Errorf("udp echo client: %w", err)
	}
	f.echo, f.conn = echo, conn
	f.wg.Add(3)
	go func() { // the echo at B
		defer f.wg.Done()
		buf := make([]byte, 64)
		for {
			n, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			echo.WriteTo(buf[:n], from)
		}
	}()
	go func() { // A's datagrams
		defer f.wg.Done()
		tick := time.NewTicker(followEvery)
		defer tick.Stop()
		for seq := 0; ; seq++ {
			conn.Write([]byte(strconv.Itoa(seq)))
			select {
			case <-f.done:
				return
			case <-tick.C:
			}
		}
	}()
	go func() { // their echoes
		defer f.wg.Done()
		buf := make([]byte, 64)
		for {
			if _, err := conn.Read(buf); err != nil {
				select {
				case <-f.done:
					return
				default:
				}
				continue // ICMP errors while the path moves
			}
			f.udp.add(time.Now())
		}
	}()
	f.cmd = tb.Command(testbed.A, "ping", "-D", "-n", "-i", strconv.FormatFloat(followEvery.Seconds(), 'f', -1, 64), dst)
	out, err := f.cmd.StdoutPipe()
	if err == nil {
		err = f.cmd.Start()
	}
	if err != nil {
		f.fail("ping", err)
		f.cmd = nil
		return f, nil
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if t, ok := pingReplyAt(sc.Text()); ok {
				f.ping.add(t)
			}
		}
	}()
	return f, nil
}

// pingReplyAt is the arrival time of a reply line of `ping -D`
// ("[1733100000.123456] 64 bytes from ...").
func pingReplyAt(line string) (time.Time, bool) {
	if !strings.HasPrefix(line, "[") || !strings.Contains(line, " bytes from ") {
		return time.Time{}, false
	}
	end := strings.IndexByte(line, ']')
	if end < 0 {
		return time.Time{}, false
	}
	s, err := strconv.ParseFloat(line[1:end], 64)
	if err != nil {
		return time.Time{}, false
	}
	sec := int64(s)
	return time.Unix(sec, int64((s-float64(sec))*1e9)), true
}

// stop ends the echoes and waits for their goroutines; later calls do
// nothing.
func (f *follower) stop() { f.once.Do(f.stopOnce) }

func (f *follower) stopOnce() {
	now := time.Now()
	f.ping.mu.Lock()
	f.ping.end = now
	f.ping.mu.Unlock()
	f.udp.mu.Lock()
	f.udp.end = now
	f.udp.mu.Unlock()
	close(f.done)
	if f.cmd != nil {
		f.cmd.Process.Kill() // the ping this run started; its output ends
	}
	f.conn.Close()
	f.echo.Close()
	f.wg.Wait()
	if f.cmd != nil {
		f.cmd.Wait()
	}
}
