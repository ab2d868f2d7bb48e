package bench

// This file owns the sender's timeline that --keep-logs writes beside the
// endpoint logs: every senderLogEvery during a download, the sending
// endpoint's association (window, in flight, pacing and delivery rates,
// RTTs, slow start, losses), the emulator's download direction (bytes in
// and out, so its queue and what the link carried; queue drops), both
// endpoints' CPU time and the send time the sender lost to late wake-ups
// (late_wake_ms, scps.Stats.LateWakeTime: a loaded host) beside what its
// streams' buffers hold (buffered_bytes: above in_flight_bytes, data
// written and not yet sent), and the tail parity's bytes (parity_bytes,
// scps/parity.go) beside the tail copies'. The bench's goodput timeline says how much arrived
// each second; this says why: where the binary and the simulator part is
// read from it (docs/adaptation.md, the fade through the binary). It reads
// the status over the endpoint's control socket in its namespace, in
// process: no fork per sample, no debug logging in the endpoint.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/scps"
	"scpsvpn/tunnel"
)

// senderLogEvery is the timeline's sampling interval: a sixth of a GEO
// round trip, fine enough to see a fade's onset and a resume.
const senderLogEvery = 100 * time.Millisecond

// senderLogHeader names the timeline's tab-separated columns; a page
// load's timeline adds pageLogColumn.
const senderLogHeader = "t_s\tcwnd_bytes\tin_flight_bytes\tpacing_bps\tdelivery_bps\tsrtt_ms\tmin_rtt_ms\tqueue_delay_ms\tslow_start\tstream_bytes_sent\tpackets_lost\tcongestion_events\tlink_in_bytes\tlink_out_bytes\tlink_queue_drops\tcpu_a_s\tcpu_b_s\tretransmit_bytes\ttail_copy_bytes\tptos\tlate_wake_ms\tbuffered_bytes\tparity_bytes\n"

// pageLogColumn is the page's bytes the client has read (HTTP bodies):
// beside link_out_bytes it shows what the receiving endpoint held back.
const pageLogColumn = "client_bytes"

// pageLogEvery is a page load's sampling interval on a path of rtt: a
// quarter of the round trip (10 ms on LEO), so the start-up's round
// trips show, and never coarser than a download's.
func pageLogEvery(rtt time.Duration) time.Duration {
	return min(max(rtt/4, 5*time.Millisecond), senderLogEvery)
}

// senderSample is one row of the timeline.
type senderSample struct {
	at         time.Duration // since the transfer started
	assoc      scps.Stats
	link       linkemu.DirCounters // the download direction (B -> A)
	cpuA, cpuB float64
	client     int64 // the client's bytes, when the timeline has the column
}

// writeSenderSample writes s as one row under senderLogHeader, and
// pageLogColumn when client is set.
func writeSenderSample(w io.Writer, s senderSample, client bool) error {
	a := s.assoc
	ss := 0
	if a.InSlowStart {
		ss = 1
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	_, err := fmt.Fprintf(w, "%.3f\t%d\t%d\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%d\t%d\t%d\t%.1f\t%d\t%d",
		s.at.Seconds(), a.Cwnd, a.BytesInFlight, 8*a.PacingRate, 8*a.DeliveryRate,
		ms(a.SRTT), ms(a.MinRTT), ms(a.QueueDelay), ss, a.StreamBytesSent, a.PacketsLost,
		a.LossEventsCongestion, s.link.InBytes, s.link.Bytes, s.link.DropQueue, s.cpuA, s.cpuB,
		a.RetransmitBytes, a.TailCopyBytes, a.PTOs, ms(a.LateWakeTime), a.BufferedBytes, a.ParityBytes)
	if err == nil && client {
		_, err = fmt.Fprintf(w, "\t%d", s.client)
	}
	if err == nil {
		_, err = io.WriteString(w, "\n")
	}
	return err
}

// logSender samples the sending side (B, the download's server) of tb
// into path every interval until the returned stop is called; stop waits
// for the last row. client, when set, reads the client's bytes for
// pageLogColumn. A sample that fails (the endpoint restarting, a slow
// answer) is skipped: the timeline is a diagnosis, not a figure.
func logSender(ctx context.Context, tb *testbed.Testbed, emu *linkemu.Emulator, path string, every time.Duration, client func() int64) (stop func()) {
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer f.Close()
		w := bufio.NewWriter(f)
		defer w.Flush()
		header := senderLogHeader
		if client != nil {
			header = strings.TrimSuffix(header, "\n") + "\t" + pageLogColumn + "\n"
		}
		if _, err := io.WriteString(w, header); err != nil {
			return
		}
		start := time.Now()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s, ok := sampleSender(tb, emu)
			if !ok {
				continue
			}
			s.at = time.Since(start)
			if client != nil {
				s.client = client()
			}
			if writeSenderSample(w, s, client != nil) != nil {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// sampleSender reads B's association, the emulator's download direction
// and both endpoints' CPU time.
func sampleSender(tb *testbed.Testbed, emu *linkemu.Emulator) (senderSample, bool) {
	var st *tunnel.Status
	err := tb.Do(testbed.B, func() error {
		var err error
		st, err = tunnel.ReadStatus(tb.Site(testbed.B).TUNName)
		return err
	})
	if err != nil || len(st.Peers) == 0 {
		return senderSample{}, false
	}
	s := senderSample{assoc: st.Peers[0].Association, link: emu.Counters().Ret}
	s.cpuA, _ = tb.CPUSeconds(testbed.A)
	s.cpuB, _ = tb.CPUSeconds(testbed.B)
	return s, true
}
