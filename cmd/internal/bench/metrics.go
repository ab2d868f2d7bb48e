package bench

// This file owns the numbers of a run: the Result record (what
// results.json holds per condition and contender) and the arithmetic that
// fills it from a Transfer and the emulator's counters: goodput and its
// share of the link's payload capacity, latency percentiles, and the bytes
// the link carried per payload byte delivered.

import (
	"math"
	"slices"
	"time"

	"scpsvpn/cmd/internal/linkemu"
)

// StatusOK marks a run that measured; anything else starts with "failed: "
// or "interrupted".
const StatusOK = "ok"

// Result is one condition x contender run.
type Result struct {
	Condition string `json:"condition"`
	Contender string `json:"contender"`
	Label     string `json:"label"`
	Status    string `json:"status"`

	DurationS    float64  `json:"duration_s"`        // measurement window
	PayloadBytes int64    `json:"payload_bytes"`     // download bytes delivered in the window
	GoodputKBps  float64  `json:"goodput_kBps"`      // kB = 1000 bytes
	Share        float64  `json:"share_of_link"`     // goodput / payload capacity (0..1)
	TTFBMs       *float64 `json:"ttfb_ms,omitempty"` // dial start to first byte; absent if none came
	Probe        *Latency `json:"request_response,omitempty"`
	LinkPerByte  *float64 `json:"link_bytes_per_payload_byte,omitempty"`
	LinkBytes    int64    `json:"link_bytes"` // both directions, during the window
	// TCPCongestion is the congestion control read back from the client
	// and server sockets of a kernel contender ("cubic/cubic").
	TCPCongestion string           `json:"tcp_congestion,omitempty"`
	Counters      linkemu.Counters `json:"link_counters"` // emulator counters over the window
	Timeline      []Point          `json:"timeline,omitempty"`
	Note          string           `json:"note,omitempty"` // what went wrong in a run that still measured

	// The measures of the transport's targets (transport.go fills them).

	// LimitShare is goodput over the payload limit of the window (rate in
	// force x 1460/1500 x (1 - loss), outages excluded), 0..1.
	LimitShare float64 `json:"share_of_limit"`
	// SteadyShare is the same share after start-up: from steadyAfterRTTs
	// round trips after the first byte to the end of the window; 0 when
	// the window is too short for it.
	SteadyShare float64 `json:"steady_share_of_limit,omitempty"`
	// QueueDropPct is the download direction's drop-tail losses as a
	// percentage of the packets its sender offered the link.
	QueueDropPct float64 `json:"queue_drops_pct"`
	// TimeTo90RTTs is, in round trips from the start of the dial, when the
	// download first sustained 90% of the payload limit for a round trip
	// (at least rateWindowMin); absent if it never did.
	TimeTo90RTTs *float64 `json:"time_to_90pct_rtts,omitempty"`
	// StartOffsetMs is how late the transfer started against the timed
	// events' schedule (conditions with a rate change or an outage).
	StartOffsetMs *float64 `json:"start_offset_ms,omitempty"`
	// Outage holds the measures of a condition with an outage.
	Outage *OutageResult `json:"outage,omitempty"`
	// Fade holds the measures of a condition whose rate falls and returns.
	Fade *FadeResult `json:"fade,omitempty"`
	// Sharing holds the measures of a shared-link workload (share.go);
	// the goodput fields above are then both flows' together.
	Sharing *ShareResult `json:"sharing,omitempty"`
	// Page holds the measures of the page-load workload (pageload.go).
	Page *PageResult `json:"page_load,omitempty"`
	// Flows holds the measures of the many-flows workload (flows.go).
	Flows *FlowsResult `json:"many_flows,omitempty"`
	// Stalled holds the measures of the stalled-readers workload (stalled.go).
	Stalled *StalledResult `json:"stalled_readers,omitempty"`
	// Resume holds the measures of the careful-resume workload
	// (resume.go).
	Resume *ResumeResult `json:"careful_resume,omitempty"`
	// Multipath holds the measures of the two-link workload
	// (multipath.go).
	Multipath *MultipathResult `json:"multipath,omitempty"`
}

// OutageResult is what a run under an outage saw.
type OutageResult struct {
	// Survived is false when the download connection failed.
	Survived bool `json:"survived"`
	// Recovery is the goodput over recoveryWindow after the link came
	// back, as a share of the payload limit over that time.
	Recovery float64 `json:"recovery"`
	// BackTo90Ms is how long after the link came back the download first
	// delivered 90% of the payload limit over a round trip (at least
	// rateWindowMin), in ms; absent if it never did.
	BackTo90Ms *float64 `json:"back_to_90pct_ms,omitempty"`
	// SentPackets and SentBytes are what the download's sender offered
	// the dead link during the outage window (every one dropped).
	SentPackets uint64 `json:"sent_packets"`
	SentBytes   uint64 `json:"sent_bytes"`
	// DropOutage counts the download direction's packets the emulator
	// dropped because the link was down (over the whole window).
	DropOutage uint64 `json:"drop_outage"`
}

// FadeResult is what a run saw of a fade (the rate falls, then returns).
type FadeResult struct {
	// HoldShare is the goodput from two round trips after the fall until
	// the return as a share of the lower rate's payload limit.
	HoldShare float64 `json:"hold_share_of_limit"`
	// BackMs is how long after the rate returned the download first held
	// fadeBackTarget of the restored limit for a round trip (at least
	// rateWindowMin); absent if it never did.
	BackMs *float64 `json:"back_to_95pct_ms,omitempty"`
}

// Latency summarizes the request/response probe.
type Latency struct {
	Count      int     `json:"count"`
	P50Ms      float64 `json:"p50_ms"`
	P95Ms      float64 `json:"p95_ms"`
	MaxMs      float64 `json:"max_ms"`
	Unanswered int     `json:"unanswered"` // still waiting when the window closed
	Error      string  `json:"error,omitempty"`
}

// OK reports whether the run measured.
func (r *Result) OK() bool { return r.Status == StatusOK }

// Percentile returns the p-quantile (0..1) of samples by linear
// interpolation between the closest ranks; false for no samples.
func Percentile(samples []time.Duration, p float64) (time.Duration, bool) {
	if len(samples) == 0 {
		return 0, false
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	p = min(max(p, 0), 1)
	pos := p * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	frac := pos - float64(lo)
	return s[lo] + time.Duration(math.Round(frac*float64(s[hi]-s[lo]))), true
}

// summarize fills the measured fields of r from a transfer and the
// emulator counters over its window.
func summarize(r *Result, cond Condition, t *Transfer, delta linkemu.Counters, probe bool) {
	r.DurationS = t.Window.Seconds()
	r.PayloadBytes = t.Bytes
	g := t.Goodput()
	r.GoodputKBps = g / 1000
	if c := cond.PayloadCapacity(); c > 0 {
		r.Share = g / c
	}
	if t.TTFB > 0 {
		r.TTFBMs = ptr(ms(t.TTFB))
	}
	if probe {
		l := &Latency{Count: len(t.Latencies), Unanswered: t.Unanswered}
		if p50, ok := Percentile(t.Latencies, 0.5); ok {
			p95, _ := Percentile(t.Latencies, 0.95)
			l.P50Ms, l.P95Ms, l.MaxMs = ms(p50), ms(p95), ms(slices.Max(t.Latencies))
		}
		if t.ProbeErr != nil {
			l.Error = t.ProbeErr.Error()
		}
		r.Probe = l
	}
	r.Counters = delta
	r.LinkBytes = LinkBytes(delta)
	if payload := t.Bytes + t.ProbeBytes; payload > 0 {
		r.LinkPerByte = ptr(float64(r.LinkBytes) / float64(payload))
	}
	r.Timeline = t.Timeline
}

// LinkBytes is what the link carried in both directions: the packets
// delivered plus those lost on the way (they were sent, and used the link,
// as a corrupted frame does). Lost bytes are estimated at the direction's
// mean packet size, since the emulator counts lost packets, not bytes.
// Packets dropped at the queue or in an outage never went on the link.
func LinkBytes(c linkemu.Counters) int64 {
	var total float64
	for _, d := range []linkemu.DirCounters{c.Fwd, c.Ret} {
		total += float64(d.Bytes)
		if d.InPackets > 0 {
			total += float64(d.DropLoss) * float64(d.InBytes) / float64(d.InPackets)
		}
	}
	return int64(math.Round(total))
}

// CountersDelta returns after - before, field by field.
func CountersDelta(before, after linkemu.Counters) linkemu.Counters {
	d := func(b, a linkemu.DirCounters) linkemu.DirCounters {
		return linkemu.DirCounters{
			InPackets: a.InPackets - b.InPackets, InBytes: a.InBytes - b.InBytes,
			Packets: a.Packets - b.Packets, Bytes: a.Bytes - b.Bytes,
			DropLoss: a.DropLoss - b.DropLoss, DropQueue: a.DropQueue - b.DropQueue,
			DropOutage: a.DropOutage - b.DropOutage, Errors: a.Errors - b.Errors,
			Reordered: a.Reordered - b.Reordered,
		}
	}
	return linkemu.Counters{Fwd: d(before.Fwd, after.Fwd), Ret: d(before.Ret, after.Ret)}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 } // 0.01 ms resolution

func ptr[T any](v T) *T { return &v }
