package bench

// This file owns the sender's timeline that --keep-logs writes beside the
// endpoint logs: every senderLogEvery during a download, the sending
// endpoint's association (window, in flight, pacing and delivery rates,
// RTTs, slow start, losses), the emulator's download direction (bytes in
// and out, so its queue and what the link carried; queue drops) and both
// endpoints' CPU time. The bench's goodput timeline says how much arrived
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
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/scps"
	"scpsvpn/tunnel"
)

// senderLogEvery is the timeline's sampling interval: a sixth of a GEO
// round trip, fine enough to see a fade's onset and a resume.
const senderLogEvery = 100 * time.Millisecond

// senderLogHeader names the timeline's tab-separated columns.
const senderLogHeader = "t_s\tcwnd_bytes\tin_flight_bytes\tpacing_bps\tdelivery_bps\tsrtt_ms\tmin_rtt_ms\tqueue_delay_ms\tslow_start\tstream_bytes_sent\tpackets_lost\tcongestion_events\tlink_in_bytes\tlink_out_bytes\tlink_queue_drops\tcpu_a_s\tcpu_b_s\n"

// senderSample is one row of the timeline.
type senderSample struct {
	at         time.Duration // since the transfer started
	assoc      scps.Stats
	link       linkemu.DirCounters // the download direction (B -> A)
	cpuA, cpuB float64
}

// writeSenderSample writes s as one row under senderLogHeader.
func writeSenderSample(w io.Writer, s senderSample) error {
	a := s.assoc
	ss := 0
	if a.InSlowStart {
		ss = 1
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	_, err := fmt.Fprintf(w, "%.3f\t%d\t%d\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\n",
		s.at.Seconds(), a.Cwnd, a.BytesInFlight, 8*a.PacingRate, 8*a.DeliveryRate,
		ms(a.SRTT), ms(a.MinRTT), ms(a.QueueDelay), ss, a.StreamBytesSent, a.PacketsLost,
		a.LossEventsCongestion, s.link.InBytes, s.link.Bytes, s.link.DropQueue, s.cpuA, s.cpuB)
	return err
}

// logSender samples the sending side (B, the download's server) of tb
// into path until the returned stop is called; stop waits for the last
// row. A sample that fails (the endpoint restarting, a slow answer) is
// skipped: the timeline is a diagnosis, not a figure.
func logSender(ctx context.Context, tb *testbed.Testbed, emu *linkemu.Emulator, path string) (stop func()) {
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
		if _, err := io.WriteString(w, senderLogHeader); err != nil {
			return
		}
		start := time.Now()
		tick := time.NewTicker(senderLogEvery)
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
			if writeSenderSample(w, s) != nil {
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
