package bench

// This file owns the report's plots, drawn with gonum.org/v1/plot: goodput
// per condition per contender as grouped bars (as a share of each link's
// payload capacity, so a 1.5 Mbit/s and a 100 Mbit/s link share one axis),
// and goodput over time under one condition as one line per contender.

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// palette gives each contender a stable colour: kernel TCP in cool
// colours, scpsvpn modes in warm ones.
var palette = map[string]color.RGBA{
	"reno":           {0x9e, 0x9e, 0x9e, 0xff},
	"cubic":          {0x42, 0x6e, 0xc8, 0xff},
	"bbr":            {0x3a, 0xa6, 0xb9, 0xff},
	"scpsvpn":        {0xe0, 0x4e, 0x39, 0xff},
	"scpsvpn-hybrid": {0xe0, 0x4e, 0x39, 0xff},
	"scpsvpn-vj":     {0xf2, 0x9e, 0x2e, 0xff},
	"scpsvpn-vegas":  {0x8e, 0x5a, 0xa8, 0xff},
	"scpsvpn-hybla":  {0x5b, 0xa8, 0x4f, 0xff},
	"scpsvpn-rate":   {0xb8, 0x86, 0x4b, 0xff},
}

var fallbackColors = []color.RGBA{{0x33, 0x33, 0x33, 0xff}, {0xd6, 0x6a, 0xa0, 0xff}, {0x6b, 0x8e, 0x23, 0xff}}

func contenderColor(name string, i int) color.Color {
	if c, ok := palette[name]; ok {
		return c
	}
	return fallbackColors[i%len(fallbackColors)]
}

// PlotGoodput draws goodput per condition (groups) and contender (bars)
// as a share of the link's payload capacity, into file (.svg or .png).
// Failed runs have no bar.
func (rep *Report) PlotGoodput(file string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Goodput, %s downloads", fmtSeconds(rep.DurationS))
	p.Y.Label.Text = "share of the link's payload capacity (%)"
	p.Y.Tick.Marker = niceTicks{}
	p.Y.Min = 0
	names := make([]string, len(rep.Conditions))
	for i, c := range rep.Conditions {
		names[i] = c.Name
	}
	p.NominalX(names...)
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil // nominal x: only the value lines help
	p.Add(grid)
	legend := plot.NewLegend()
	n := len(rep.Contenders)
	width := vg.Points(max(5, groupWidth/float64(max(n, 1))))
	maxShare := 0.0
	for i, ct := range rep.Contenders {
		vals := make(plotter.Values, len(rep.Conditions))
		measured := false
		for j, c := range rep.Conditions {
			if r := rep.result(c.Name, ct.Name); r != nil && r.OK() {
				vals[j] = r.Share * 100
				maxShare = max(maxShare, vals[j])
				measured = true
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("goodput plot: %w", err)
		}
		bars.Color = contenderColor(ct.Name, i)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(float64(i)-float64(n-1)/2) * width
		p.Add(bars)
		name := ct.Name
		if !measured {
			name += " (failed)"
		}
		legend.Add(name, bars)
	}
	p.Y.Max = max(100, maxShare*1.05)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5 // room for each group's bars
	w := vg.Points(float64(max(360, 60+len(names)*(n*int(width.Points())+30)))) + legendSpace(&legend)
	return save(p, &legend, w, vg.Points(340), file)
}

// PlotTimeline draws the download rate over time of every contender that
// measured under cond, into file.
func (rep *Report) PlotTimeline(cond, file string) error {
	p := plot.New()
	var ci *ConditionInfo
	for i := range rep.Conditions {
		if rep.Conditions[i].Name == cond {
			ci = &rep.Conditions[i]
		}
	}
	if ci == nil {
		return fmt.Errorf("timeline plot: no condition %q in the report", cond)
	}
	p.Title.Text = fmt.Sprintf("Goodput over time, %s (%s)", ci.Name, ci.Summary)
	p.X.Label.Text = "seconds since connect()"
	p.Y.Label.Text = "kB/s"
	p.X.Tick.Marker, p.Y.Tick.Marker = niceTicks{}, niceTicks{}
	p.Title.Padding = vg.Points(6)
	p.X.Min, p.Y.Min = 0, 0
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	lines := 0
	peak := 0.0
	for i, ct := range rep.Contenders {
		r := rep.result(cond, ct.Name)
		if r == nil || !r.OK() || len(r.Timeline) == 0 {
			continue
		}
		l, top, err := rateLine(r.Timeline, 0)
		if err != nil {
			return fmt.Errorf("timeline plot: %w", err)
		}
		peak = max(peak, top)
		l.Color = contenderColor(ct.Name, i)
		l.Width = vg.Points(1.5)
		if ct.Kernel != "" {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		legend.Add(ct.Name, l)
		lines++
	}
	if lines == 0 {
		return fmt.Errorf("timeline plot: no run under %s measured", cond)
	}
	addCapacity(p, &legend, ci.CapacityKBps, rep.DurationS)
	p.Y.Max = max(ci.CapacityKBps*1.25, peak*1.05)
	return save(p, &legend, vg.Points(600)+legendSpace(&legend), vg.Points(360), file)
}

// PlotShare draws the rate over time of each flow of the shared-link run
// r under cond into file, with the link's capacity and an equal share.
func (rep *Report) PlotShare(r *Result, file string) error {
	if r.Sharing == nil || len(r.Sharing.Flows) == 0 {
		return fmt.Errorf("share plot: %s under %s has no flows", r.Contender, r.Condition)
	}
	var ci ConditionInfo
	for _, c := range rep.Conditions {
		if c.Name == r.Condition {
			ci = c
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s under %s (%s)", r.Contender, ci.Name, ci.Summary)
	p.X.Label.Text = "seconds since the first flow started"
	p.Y.Label.Text = "kB/s"
	p.X.Tick.Marker, p.Y.Tick.Marker = niceTicks{}, niceTicks{}
	p.X.Min, p.Y.Min = 0, 0
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	peak := 0.0
	for i, f := range r.Sharing.Flows {
		l, top, err := rateLine(f.Timeline, f.StartS)
		if err != nil {
			return fmt.Errorf("share plot: %w", err)
		}
		peak = max(peak, top)
		l.Color = fallbackColors[(i+1)%len(fallbackColors)]
		if c, ok := palette[f.Name]; ok {
			l.Color = c
		} else if i == 0 {
			l.Color = palette["scpsvpn"]
		}
		l.Width = vg.Points(1.5)
		p.Add(l)
		legend.Add(f.Label, l)
	}
	addCapacity(p, &legend, ci.CapacityKBps, r.DurationS)
	if half, err := plotter.NewLine(plotter.XYs{{X: 0, Y: ci.CapacityKBps / 2}, {X: r.DurationS, Y: ci.CapacityKBps / 2}}); err == nil {
		half.Color = color.Gray{Y: 0x90}
		half.Width = vg.Points(0.75)
		half.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(half)
		legend.Add("equal share", half)
	}
	p.Y.Max = max(ci.CapacityKBps*1.25, peak*1.05)
	return save(p, &legend, vg.Points(600)+legendSpace(&legend), vg.Points(360), file)
}

// rateLine is the line of a timeline (rates per interval ending at T) of
// a download that started at start seconds, from zero; and its peak in
// kB/s.
func rateLine(tl []Point, start float64) (*plotter.Line, float64, error) {
	xys := make(plotter.XYs, 0, len(tl)+1)
	xys = append(xys, plotter.XY{X: start, Y: 0})
	peak := 0.0
	for _, pt := range tl {
		xys = append(xys, plotter.XY{X: pt.T, Y: pt.Rate / 1000})
		peak = max(peak, pt.Rate/1000)
	}
	l, err := plotter.NewLine(xys)
	return l, peak, err
}

// addCapacity draws the link's payload capacity (kB/s) as a reference
// line over dur seconds.
func addCapacity(p *plot.Plot, legend *plot.Legend, capacity, dur float64) {
	capLine, err := plotter.NewLine(plotter.XYs{{X: 0, Y: capacity}, {X: dur, Y: capacity}})
	if err != nil {
		return
	}
	capLine.Color = color.Gray{Y: 0x60}
	capLine.Width = vg.Points(0.75)
	capLine.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
	p.Add(capLine)
	legend.Add("link capacity", capLine)
}

// groupWidth is the width in points of one condition's bars.
const groupWidth = 80

// legendSpace is the width of the strip right of the data area that holds
// the legend, so it never covers bars or lines.
func legendSpace(l *plot.Legend) vg.Length {
	return l.Rectangle(draw.Canvas{}).Size().X + vg.Points(24)
}

// save draws p with legend in a strip on its right into file.
func save(p *plot.Plot, legend *plot.Legend, w, h vg.Length, file string) (err error) {
	format := strings.TrimPrefix(filepath.Ext(file), ".")
	if format != "svg" && format != "png" {
		return fmt.Errorf("plot %s: want a .svg or .png file", file)
	}
	c, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	dc := draw.New(c)
	lw := legendSpace(legend)
	p.Draw(draw.Crop(dc, 0, -lw, 0, 0))
	legend.Top, legend.Left = true, true
	legend.Draw(draw.Crop(dc, w-lw+vg.Points(12), 0, 0, -p.Title.TextStyle.Height(p.Title.Text)-vg.Points(12)))
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("saving plot: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("saving plot %s: %w", file, cerr)
		}
	}()
	if _, err := c.WriteTo(f); err != nil {
		return fmt.Errorf("saving plot %s: %w", file, err)
	}
	return nil
}

// niceTicks labels an axis at 1, 2 or 5 times a power of ten, about five
// labels from min to max, without needless decimals.
type niceTicks struct{}

// Ticks implements plot.Ticker.
func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'f', -1, 64)}}
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	decimals := max(0, -int(math.Floor(math.Log10(step))))
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
	}
	return ticks
}
