package bench

// This file owns the report: the Report record (results.json), the facts
// about the run that make it reproducible (command line, date, machine,
// conditions), and its rendering as report.md with one table per metric,
// ratios of scpsvpn to kernel TCP, the failed runs and the plots.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/configs"
)

// Report is everything a benchmark run produced.
type Report struct {
	Command     string          `json:"command"`
	Date        time.Time       `json:"date"`
	Machine     Machine         `json:"machine"`
	DurationS   float64         `json:"duration_s"` // per run
	Seed        uint64          `json:"seed"`
	Probe       string          `json:"probe"` // the request/response probe, in words
	Conditions  []ConditionInfo `json:"conditions"`
	Contenders  []ContenderInfo `json:"contenders"`
	Results     []*Result       `json:"results"`
	ElapsedS    float64         `json:"elapsed_s"` // wall clock of the whole run
	Interrupted bool            `json:"interrupted,omitempty"`
	Plots       []string        `json:"plots,omitempty"` // file names in the report directory
	// Workload is WorkloadPage for a page-load run (Page is its page);
	// empty or WorkloadDownload for downloads.
	Workload string     `json:"workload,omitempty"`
	Page     *PageSpec  `json:"page,omitempty"`
	Flows    *FlowsSpec `json:"flows,omitempty"` // the many-flows workload's sizes
	// Stalled is the stalled-readers workload's sizes.
	Stalled *StalledSpec `json:"stalled,omitempty"`
	// Resume is the careful-resume workload's sizes.
	Resume *ResumeSpec `json:"resume,omitempty"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	Hostname string `json:"hostname"`
	Kernel   string `json:"kernel"`
	CPU      string `json:"cpu"`
	Cores    int    `json:"cores"`
	LoadAvg  string `json:"load_average_at_start"`
	Go       string `json:"go"`
}

// ConditionInfo is a condition as results.json records it.
type ConditionInfo struct {
	Name         string  `json:"name"`
	Desc         string  `json:"description"`
	DownBps      int64   `json:"down_bps"`
	UpBps        int64   `json:"up_bps"`
	RTTMs        float64 `json:"rtt_ms"`
	LossDown     float64 `json:"loss_down"`
	LossUp       float64 `json:"loss_up"`
	OutageEvery  string  `json:"outage_every,omitempty"` // "15s:100ms"
	CapacityKBps float64 `json:"payload_capacity_kBps"`
	Summary      string  `json:"summary"`
	// The transport targets' additions.
	TransportTable  bool    `json:"transport_table,omitempty"`
	AdaptationTable bool    `json:"adaptation_table,omitempty"`
	DownSchedule    string  `json:"down_schedule,omitempty"` // "10s:10Mbit", offsets from the transfer's start
	Outage          string  `json:"outage,omitempty"`        // "10s:30s" (start:duration), from the transfer's start
	MinDurationS    float64 `json:"min_duration_s,omitempty"`
	PeerLinkA       string  `json:"peer_link_a,omitempty"` // what scpsvpn was told, when not the truth
}

// ContenderInfo is a contender as results.json records it.
type ContenderInfo struct {
	Name       string `json:"name"`
	Label      string `json:"label"`
	Kernel     string `json:"kernel_tcp_congestion,omitempty"`
	Congestion string `json:"scpsvpn_congestion,omitempty"`
	Share      string `json:"shared_link_workload,omitempty"`
	Beside     string `json:"beside_kernel_tcp,omitempty"`
}

// NewConditionInfo records a condition.
func NewConditionInfo(c Condition) ConditionInfo {
	ci := ConditionInfo{
		Name: c.Name, Desc: c.Desc, DownBps: c.Down, UpBps: c.Up,
		RTTMs: ms(c.RTT), LossDown: c.LossDown, LossUp: c.LossUp,
		CapacityKBps: math.Round(c.PayloadCapacity()/10) / 100, Summary: c.Summary(),
	}
	if c.OutageEvery != (linkemu.Periodic{}) {
		ci.OutageEvery = fmt.Sprintf("%v:%v", c.OutageEvery.Every, c.OutageEvery.Duration)
	}
	ci.TransportTable, ci.AdaptationTable = c.TransportTable, c.AdaptationTable
	var steps []string
	for _, s := range c.DownSchedule {
		steps = append(steps, fmt.Sprintf("%v:%s", s.At, configs.FormatRate(s.Rate)))
	}
	ci.DownSchedule = strings.Join(steps, ",")
	if c.Outage != (linkemu.Outage{}) {
		ci.Outage = fmt.Sprintf("%v:%v", c.Outage.Start, c.Outage.Duration)
	}
	ci.MinDurationS = c.MinDuration.Seconds()
	if c.PeerNoRate || (c.PeerRateScale != 0 && c.PeerRateScale != 1) || c.PeerLossAuto {
		ci.PeerLinkA, _ = c.PeerLinks("")
	}
	return ci
}

// NewContenderInfo records a contender.
func NewContenderInfo(c Contender) ContenderInfo {
	return ContenderInfo{Name: c.Name, Label: c.Label(), Kernel: c.Kernel, Congestion: c.Congestion, Share: string(c.Share), Beside: c.Beside}
}

// DescribeMachine gathers the facts about this machine the report states.
func DescribeMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// CommandLine renders argv as a shell command, the program as "scpsvpn".
func CommandLine(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	parts := []string{"scpsvpn"}
	for _, a := range argv[1:] {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// WriteJSON writes results.json.
func (rep *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// ReadReport reads a results.json back.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &rep, nil
}

// result finds the run of a condition and contender.
func (rep *Report) result(cond, contender string) *Result {
	for _, r := range rep.Results {
		if r.Condition == cond && r.Contender == contender {
			return r
		}
	}
	return nil
}

// WriteMarkdown writes report.md.
func (rep *Report) WriteMarkdown(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	w := bufio.NewWriter(f)
	rep.RenderMarkdown(w)
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// RenderMarkdown renders the report.
func (rep *Report) RenderMarkdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# scpsvpn benchmark\n\n")
	if rep.Interrupted {
		p("**Interrupted: the tables hold the runs that finished.**\n\n")
	}
	p("- command: `%s`\n", rep.Command)
	p("- date: %s\n", rep.Date.Format("2006-01-02 15:04:05 MST"))
	m := rep.Machine
	p("- machine: %s, %s, %s, %d cores, load average at start %s, %s\n", orUnknown(m.Hostname), orUnknown(m.Kernel), orUnknown(m.CPU), m.Cores, orUnknown(m.LoadAvg), m.Go)
	if rep.Page != nil {
		p("- each run: %s; loss seed %d\n", rep.Page.Describe(), rep.Seed)
	} else if rep.Flows != nil {
		p("- each run: %s; loss seed %d\n", rep.Flows.Describe(rep.DurationS), rep.Seed)
	} else if rep.Stalled != nil {
		p("- each run: %s; loss seed %d\n", rep.Stalled.Describe(rep.DurationS), rep.Seed)
	} else if rep.Workload == WorkloadMultipath {
		p("- each run: two emulated links at once, scpsvpn only: a bulk download of %s from site B with a request probe beside it, then a download during which the link in use is cut; loss seeds %d and %d\n", fmtSeconds(rep.DurationS/2), rep.Seed, rep.Seed+1)
	} else if rep.Resume != nil {
		p("- each run: %s; loss seed %d\n", rep.Resume.Describe(), rep.Seed)
	} else {
		p("- each run: a %s download from site B (server) to site A (client) through the userspace link emulator, on a fresh two-site testbed; loss seed %d (every contender meets the same loss pattern per packet sequence)\n", fmtSeconds(rep.DurationS), rep.Seed)
	}
	if rep.Probe != "" {
		p("- latency probe: %s\n", rep.Probe)
	}
	p("- kernel TCP runs end to end over the emulated link with TCP_CONGESTION set on both sockets; scpsvpn runs go through both endpoints, each told the link's rates and RTT in [peer.link]\n")
	p("- total time %s\n\n", (time.Duration(rep.ElapsedS * float64(time.Second))).Round(time.Second))

	p("## Conditions\n\n")
	p("| condition | link | payload capacity | source |\n|---|---|---:|---|\n")
	for _, c := range rep.Conditions {
		p("| %s | %s | %.1f kB/s | %s |\n", c.Name, c.Summary, c.CapacityKBps, c.Desc)
	}
	p("\n")
	noted := false
	for _, c := range rep.Conditions {
		if c.MinDurationS > rep.DurationS {
			noted = true
			p("- %s runs %s per contender (its minimum: time before and after its events)\n", c.Name, fmtSeconds(c.MinDurationS))
		}
		if c.DownSchedule != "" || c.Outage != "" {
			noted = true
			p("- %s: the rate change and outage offsets count from the start of the transfer (connect()), not of the link\n", c.Name)
		}
	}
	if noted {
		p("\n")
	}

	if rep.Workload == WorkloadPage {
		rep.renderPage(w)
		rep.renderTail(w)
		return
	}
	if rep.Workload == WorkloadFlows {
		rep.renderFlows(w)
		rep.renderTail(w)
		return
	}
	if rep.Workload == WorkloadStalled {
		rep.renderStalled(w)
		rep.renderTail(w)
		return
	}
	if rep.Workload == WorkloadMultipath {
		rep.renderMultipath(w)
		rep.renderTail(w)
		return
	}
	if rep.Workload == WorkloadResume {
		rep.renderResume(w)
		rep.renderTail(w)
		return
	}
	names := make([]string, len(rep.Contenders))
	for i, c := range rep.Contenders {
		names[i] = c.Name
	}
	table := func(title, note string, cell func(*Result) string) {
		p("## %s\n\n", title)
		if note != "" {
			p("%s\n\n", note)
		}
		p("| condition | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---:|", len(names)))
		for _, c := range rep.Conditions {
			row := make([]string, len(names))
			for i, n := range names {
				r := rep.result(c.Name, n)
				switch {
				case r == nil:
					row[i] = ""
				case !r.OK():
					row[i] = statusWord(r.Status)
				default:
					row[i] = cell(r)
				}
			}
			p("| %s | %s |\n", c.Name, strings.Join(row, " | "))
		}
		p("\n")
	}
	table("Goodput", "kB/s of download payload (kB = 1000 bytes) and its share of the link's payload capacity (rate/8 x 1460/1500).",
		func(r *Result) string { return fmt.Sprintf("%.1f (%.0f%%)", r.GoodputKBps, r.Share*100) })
	rep.renderRatios(w)
	table("Queue drops", "Drop-tail losses of the download direction (the emulator's queue overflowing) as % of the packets its sender offered the link.",
		func(r *Result) string { return fmt.Sprintf("%.2f", r.QueueDropPct) })
	rep.renderTransport(w)
	rep.renderAdaptation(w)
	rep.renderShare(w)
	table("Time to first byte", "ms from the start of the client's connect() to the first byte of the download (a fresh connection).",
		func(r *Result) string {
			if r.TTFBMs == nil {
				return "-"
			}
			return fmt.Sprintf("%.0f", *r.TTFBMs)
		})
	if rep.Probe != "" {
		table("Request/response latency during the download", "p50 / p95 ms of the probe's echoes; (+1) marks a request still unanswered at the end of the run after waiting longer than any answered one.",
			func(r *Result) string {
				pr := r.Probe
				if pr == nil || pr.Count == 0 {
					if pr != nil && pr.Unanswered > 0 {
						return fmt.Sprintf("none (+%d)", pr.Unanswered)
					}
					return "-"
				}
				s := fmt.Sprintf("%.0f / %.0f", pr.P50Ms, pr.P95Ms)
				if pr.Unanswered > 0 {
					s += fmt.Sprintf(" (+%d)", pr.Unanswered)
				}
				return s
			})
	}
	table("Link bytes per payload byte", "Bytes the emulated link carried in both directions (delivered, plus packets lost on the way at their mean size) per payload byte delivered; ACKs, headers, retransmissions and the tunnel's own overhead all count.",
		func(r *Result) string {
			if r.LinkPerByte == nil {
				return "-"
			}
			return fmt.Sprintf("%.3f", *r.LinkPerByte)
		})
	rep.renderTail(w)
}

// renderTail writes the runs that failed, the notes and the plots.
func (rep *Report) renderTail(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	var failed []*Result
	var notes []*Result
	for _, r := range rep.Results {
		if !r.OK() {
			failed = append(failed, r)
		} else if r.Note != "" {
			notes = append(notes, r)
		}
	}
	if len(failed) > 0 {
		p("## Runs that did not measure\n\n")
		// One line per contender and reason, with the conditions it hit.
		type key struct{ contender, status string }
		var order []key
		conds := map[key][]string{}
		for _, r := range failed {
			k := key{r.Contender, r.Status}
			if conds[k] == nil {
				order = append(order, k)
			}
			conds[k] = append(conds[k], r.Condition)
		}
		for _, k := range order {
			p("- %s under %s: %s\n", k.contender, strings.Join(conds[k], ", "), k.status)
		}
		p("\n")
	}
	if len(notes) > 0 {
		p("## Notes\n\n")
		for _, r := range notes {
			p("- %s, %s: %s\n", r.Condition, r.Contender, r.Note)
		}
		p("\n")
	}
	if len(rep.Plots) > 0 {
		p("## Plots\n\n")
		for _, f := range rep.Plots {
			p("![%s](%s)\n\n", strings.TrimSuffix(f, filepath.Ext(f)), f)
		}
	}
}

// renderRatios writes each scpsvpn contender's goodput as a multiple of the
// best kernel TCP contender that measured under the same condition.
func (rep *Report) renderRatios(w io.Writer) {
	var scps, kernel []ContenderInfo
	for _, c := range rep.Contenders {
		if c.Kernel == "" {
			scps = append(scps, c)
		} else {
			kernel = append(kernel, c)
		}
	}
	if len(scps) == 0 || len(kernel) == 0 {
		return
	}
	fmt.Fprintf(w, "### scpsvpn goodput as a multiple of the best kernel TCP\n\n")
	fmt.Fprintf(w, "| condition | best kernel TCP |")
	for _, c := range scps {
		fmt.Fprintf(w, " %s |", c.Name)
	}
	fmt.Fprintf(w, "\n|---|---|%s\n", strings.Repeat("---:|", len(scps)))
	for _, c := range rep.Conditions {
		var best *Result
		for _, k := range kernel {
			if r := rep.result(c.Name, k.Name); r != nil && r.OK() && (best == nil || r.GoodputKBps > best.GoodputKBps) {
				best = r
			}
		}
		bestName := "-"
		if best != nil {
			bestName = fmt.Sprintf("%s, %.1f kB/s", best.Contender, best.GoodputKBps)
		}
		fmt.Fprintf(w, "| %s | %s |", c.Name, bestName)
		for _, s := range scps {
			r := rep.result(c.Name, s.Name)
			switch {
			case r == nil:
				fmt.Fprintf(w, "  |")
			case !r.OK():
				fmt.Fprintf(w, " %s |", statusWord(r.Status))
			case best == nil || best.GoodputKBps == 0:
				fmt.Fprintf(w, " - |")
			default:
				fmt.Fprintf(w, " %s |", Ratio(r.GoodputKBps, best.GoodputKBps))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// Ratio prints a/b as "2.31x"; "-" when b is zero.
func Ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a/b) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// statusWord shortens a status for a table cell; the reason is listed below
// the tables.
// workloadRows writes one row per run of a workload's table, conditions
// in order, contenders in order: a run that did not measure (or lacks
// the workload's results, has(r) false) gets its status and cols empty
// cells; the others row(r).
func (rep *Report) workloadRows(w io.Writer, cols int, has func(*Result) bool, row func(*Result) string) {
	for _, c := range rep.Conditions {
		for _, ct := range rep.Contenders {
			r := rep.result(c.Name, ct.Name)
			if r == nil {
				continue
			}
			if !r.OK() || !has(r) {
				fmt.Fprintf(w, "| %s | %s | %s |%s\n", c.Name, ct.Name, statusWord(r.Status), strings.Repeat(" |", cols-1))
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", c.Name, ct.Name, row(r))
		}
	}
}

func statusWord(s string) string {
	if strings.HasPrefix(s, "failed") {
		return "failed"
	}
	return s
}

func fmtSeconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).String()
}
