package bench

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleReport is two conditions x three contenders: one run failed, one
// is missing (as after an interruption).
func sampleReport(t *testing.T) *Report {
	t.Helper()
	conds, err := SelectConditions("C1,C2")
	if err != nil {
		t.Fatal(err)
	}
	cts, err := SelectContenders("cubic,bbr,scpsvpn-vj")
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{
		Command: "scpsvpn bench --out x", Date: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Machine:   Machine{Hostname: "box", Kernel: "Linux 6", CPU: "cpu", Cores: 2, LoadAvg: "1 1 1", Go: "go1.26"},
		DurationS: 20, Seed: 1, Probe: "probe words", ElapsedS: 100,
	}
	for _, c := range conds {
		rep.Conditions = append(rep.Conditions, NewConditionInfo(c))
	}
	for _, c := range cts {
		rep.Contenders = append(rep.Contenders, NewContenderInfo(c))
	}
	ok := func(cond, ct string, kBps, ttfb, p50, p95, per float64) *Result {
		return &Result{
			Condition: cond, Contender: ct, Status: StatusOK, DurationS: 20,
			GoodputKBps: kBps, Share: kBps * 1000 / 182500, TTFBMs: ptr(ttfb),
			Probe:       &Latency{Count: 30, P50Ms: p50, P95Ms: p95},
			LinkPerByte: ptr(per),
			Timeline:    []Point{{T: 1, Rate: kBps * 500}, {T: 2, Rate: kBps * 1000}},
		}
	}
	rep.Results = []*Result{
		ok("C1", "cubic", 120, 612, 640, 700, 1.08),
		ok("C1", "bbr", 150, 615, 320, 400, 1.05),
		ok("C1", "scpsvpn-vj", 165, 310, 305, 330, 1.02),
		ok("C2", "cubic", 40, 610, 600, 650, 1.1),
		{Condition: "C2", Contender: "bbr", Status: "failed: setting TCP_CONGESTION to \"bbr\": no such file"},
	}
	return rep
}

// failingReport adds runs that failed alike under two conditions.
func failingReport(t *testing.T) *Report {
	rep := sampleReport(t)
	rep.Results[2] = &Result{Condition: "C1", Contender: "scpsvpn-vj", Status: "failed: no controller"}
	rep.Results = append(rep.Results, &Result{Condition: "C2", Contender: "scpsvpn-vj", Status: "failed: no controller"})
	return rep
}

func TestRenderMarkdown(t *testing.T) {
	rep := sampleReport(t)
	var b bytes.Buffer
	rep.RenderMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"- command: `scpsvpn bench --out x`",
		"2026-01-02 03:04:05 UTC",
		"box, Linux 6, cpu, 2 cores",
		"| C2 | 1.5Mbit down / 1.5Mbit up, RTT 300ms, loss 3% down | 182.5 kB/s | paper C2",
		"| condition | cubic | bbr | scpsvpn-vj |",
		"| C1 | 120.0 (66%) | 150.0 (82%) | 165.0 (90%) |",
		"| C2 | 40.0 (22%) | failed |  |",
		"| C1 | bbr, 150.0 kB/s | 1.10x |",
		"| C2 | cubic, 40.0 kB/s |  |",
		"| C1 | 612 | 615 | 310 |",
		"| C1 | 640 / 700 | 320 / 400 | 305 / 330 |",
		"| C1 | 1.080 | 1.050 | 1.020 |",
		"- bbr under C2: failed: setting TCP_CONGESTION",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Interrupted") {
		t.Error("a complete run marked interrupted")
	}
	rep.Interrupted = true
	b.Reset()
	rep.RenderMarkdown(&b)
	if !strings.Contains(b.String(), "Interrupted") {
		t.Error("an interrupted run is not marked")
	}
}

func TestFailedRunsGrouped(t *testing.T) {
	var b bytes.Buffer
	failingReport(t).RenderMarkdown(&b)
	md := b.String()
	if !strings.Contains(md, "- scpsvpn-vj under C1, C2: failed: no controller\n") || strings.Count(md, "no controller") != 1 {
		t.Errorf("alike failures are not grouped:\n%s", md)
	}
	if !strings.Contains(md, "| C1 | bbr, 150.0 kB/s | failed |") {
		t.Errorf("ratio table:\n%s", md)
	}
}

func TestRatioAndWords(t *testing.T) {
	if Ratio(3, 1.5) != "2.00x" || Ratio(1, 0) != "-" || Ratio(0, 0) != "-" {
		t.Errorf("Ratio: %s %s %s", Ratio(3, 1.5), Ratio(1, 0), Ratio(0, 0))
	}
	if statusWord("failed: long reason") != "failed" || statusWord("interrupted") != "interrupted" {
		t.Error("statusWord")
	}
}

func TestCommandLine(t *testing.T) {
	got := CommandLine([]string{"/usr/local/bin/scpsvpn", "bench", "--out", "my dir", "--contenders", "it's"})
	want := `scpsvpn bench --out 'my dir' --contenders 'it'\''s'`
	if got != want {
		t.Errorf("CommandLine = %s, want %s", got, want)
	}
}

func TestWriteReport(t *testing.T) {
	rep := sampleReport(t)
	dir := t.TempDir()
	if err := WriteReport(rep, dir, "C1"); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != len(rep.Results) || back.Results[2].Contender != "scpsvpn-vj" || *back.Results[2].TTFBMs != 310 {
		t.Errorf("results.json round trip: %+v", back.Results)
	}
	if back.Conditions[1].Name != "C2" || back.Conditions[1].LossDown != 0.03 || back.Machine.Cores != 2 {
		t.Errorf("conditions/machine round trip: %+v %+v", back.Conditions, back.Machine)
	}
	if strings.Join(back.Plots, ",") != "goodput.svg,timeline-C1.svg" {
		t.Errorf("plots %v", back.Plots)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "![goodput](goodput.svg)") || !strings.Contains(string(md), "(timeline-C1.svg)") {
		t.Errorf("report.md does not show the plots:\n%s", md)
	}
	for _, p := range back.Plots {
		checkSVG(t, filepath.Join(dir, p), "cubic", "scpsvpn-vj")
	}
}

// checkSVG parses an SVG file as XML and looks for texts in it.
func checkSVG(t *testing.T, path string, texts ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var all strings.Builder
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = v.Name.Local
			}
		case xml.CharData:
			all.Write(v)
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element %q", path, root)
	}
	for _, s := range texts {
		if !strings.Contains(all.String(), s) {
			t.Errorf("%s does not show %q", path, s)
		}
	}
}

func TestPlots(t *testing.T) {
	rep := sampleReport(t)
	dir := t.TempDir()
	if err := rep.PlotGoodput(filepath.Join(dir, "g.png")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "g.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil || img.Bounds().Dx() < 300 {
		t.Fatalf("goodput png: %v %v", err, img)
	}
	if err := rep.PlotTimeline("C2", filepath.Join(dir, "t.svg")); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, filepath.Join(dir, "t.svg"), "cubic", "link capacity")
	if err := rep.PlotTimeline("LEO", filepath.Join(dir, "x.svg")); err == nil {
		t.Error("a timeline of a condition not in the report")
	}
	if err := rep.PlotGoodput(filepath.Join(dir, "g.pdf")); err == nil {
		t.Error("a plot in an unsupported format")
	}
	// A contender that never measured is marked in the legend.
	rep.Results = rep.Results[:1]
	if err := rep.PlotGoodput(filepath.Join(dir, "g2.svg")); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, filepath.Join(dir, "g2.svg"), "bbr (failed)")
	rep.Results = []*Result{{Condition: "C1", Contender: "cubic", Status: "failed: x"}}
	if err := rep.PlotTimeline("C1", filepath.Join(dir, "t2.svg")); err == nil {
		t.Error("a timeline without a measured run")
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 100, "0,20,40,60,80,100"},
		{0, 228, "0,50,100,150,200"},
		{0, 4, "0,1,2,3,4"},
		{0, 1.2, "0.0,0.5,1.0"},
		{0, 0.03, "0.00,0.01,0.02,0.03"},
		{-10, 10, "-10,-5,0,5,10"},
		{5, 5, "5"},
	} {
		var labels []string
		for _, tk := range (niceTicks{}).Ticks(tc.lo, tc.hi) {
			labels = append(labels, tk.Label)
		}
		if got := strings.Join(labels, ","); got != tc.want {
			t.Errorf("Ticks(%v, %v) = %s, want %s", tc.lo, tc.hi, got, tc.want)
		}
	}
}
