package bench

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestPageSizesAreFixedAndInRange(t *testing.T) {
	p := DefaultPage
	a, b := p.Sizes(), p.Sizes()
	if len(a) != 51 || a[0] != 30_000 {
		t.Fatalf("sizes %v: want the 30 kB HTML and 50 objects", a)
	}
	distinct := map[int]bool{}
	for i, s := range a[1:] {
		if s < 5_000 || s > 200_000 {
			t.Errorf("object %d is %d bytes, outside 5-200 kB", i+1, s)
		}
		if s != b[i+1] {
			t.Fatalf("object %d: %d then %d bytes: the list is not fixed", i+1, s, b[i+1])
		}
		distinct[s] = true
	}
	if len(distinct) < 40 {
		t.Errorf("only %d distinct sizes among 50", len(distinct))
	}
	var sum int64
	for _, s := range a {
		sum += int64(s)
	}
	if p.Bytes() != sum {
		t.Errorf("Bytes() = %d, the sizes sum to %d", p.Bytes(), sum)
	}
	small := NewPageSpec(3, 2_000)
	if got := small.Sizes(); len(got) != 4 || got[0] != 2_000 || got[1] != 2_000 {
		t.Errorf("a page of at most 2 kB: %v", got)
	}
}

func TestPageFloor(t *testing.T) {
	c, _ := conditionByName("GEO-10/2")
	// 1.3 s of round trips plus 1,216,666 bytes at 10 Mbit/s x 1460/1500.
	got := c.PageFloor(1_216_666)
	if want := 1300*time.Millisecond + time.Second; got < want-time.Millisecond || got > want+time.Millisecond {
		t.Errorf("floor %v, want %v", got, want)
	}
	// HTTP/1.1 over 6 connections, 50 objects: 1 + 9 round trips.
	got = c.PageFloorHTTP1(1_216_666, 50)
	if want := 6500*time.Millisecond + time.Second; got < want-time.Millisecond || got > want+time.Millisecond {
		t.Errorf("HTTP/1.1 floor %v, want %v", got, want)
	}
}

// TestLoadPageLoopback loads a small page over both protocols from a
// server on loopback and checks what the client saw.
func TestLoadPageLoopback(t *testing.T) {
	spec := NewPageSpec(12, 40_000)
	for _, proto := range []pageProto{pageHTTP1, pageHTTP2} {
		t.Run(strings.ReplaceAll(proto.name, "/", ""), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var hooked int
			srv := ServePage(ln, spec, func(net.Conn) error { hooked++; return nil }, nil)
			defer srv.Close()
			dial := func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", ln.Addr().String())
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := LoadPage(ctx, spec, proto, dial, ln.Addr().String(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if l.Conns < 1 || l.Conns > proto.conns {
				t.Errorf("%d connections, want 1 to %d", l.Conns, proto.conns)
			}
			if l.HTMLMs <= 0 || l.FirstObjectMs < l.HTMLMs || l.Ms < l.FirstObjectMs {
				t.Errorf("times out of order: %+v", l)
			}
			srv.Close()
			if hooked != l.Conns {
				t.Errorf("the accept hook ran %d times for %d connections", hooked, l.Conns)
			}
		})
	}
}

// TestPageServerRefusesWhatTheHookRefuses: a connection the accept hook
// refuses is closed, the load fails, and Err says why.
func TestPageServerRefusesWhatTheHookRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("server socket runs \"reno\", not \"bbr\"")
	srv := ServePage(ln, NewPageSpec(2, 10_000), func(net.Conn) error { return refusal }, nil)
	defer srv.Close()
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := LoadPage(ctx, NewPageSpec(2, 10_000), pageHTTP1, dial, ln.Addr().String(), nil); err == nil {
		t.Error("the page loaded through refused connections")
	}
	if !errors.Is(srv.Err(), refusal) {
		t.Errorf("Err() = %v", srv.Err())
	}
}

func TestRenderPage(t *testing.T) {
	c, _ := conditionByName("GEO-10/2")
	page := func(h1, h2 float64) *PageResult {
		return &PageResult{Objects: 50, Bytes: 5_000_000, FloorMs: 5000, Floor1Ms: 8000,
			HTTP1: &PageLoad{Ms: h1, FloorRatio: h1 / 8000, Conns: 6},
			HTTP2: &PageLoad{Ms: h2, FloorRatio: h2 / 5000, HTMLMs: 1400, FirstObjectMs: 2100, Conns: 1}}
	}
	rep := &Report{
		Workload: WorkloadPage, Page: &DefaultPage,
		Conditions: []ConditionInfo{NewConditionInfo(c)},
		Contenders: []ContenderInfo{NewContenderInfo(KernelContender("bbr")), NewContenderInfo(SCPSContender(""))},
		Results: []*Result{
			{Condition: c.Name, Contender: "bbr", Status: StatusOK, Page: page(16000, 12000)},
			{Condition: c.Name, Contender: "scpsvpn", Status: StatusOK, Page: page(8000, 6000)},
		},
	}
	var b strings.Builder
	rep.RenderMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"## Page load",
		"| GEO-10/2 | bbr | 8.00 | 16.00 | 2.00x | 1.00x | 6 | 5.00 | 12.00 | 2.40x | 1.00x | 1.40, 2.10 |",
		"| GEO-10/2 | scpsvpn | 8.00 | 8.00 | 1.00x | 0.50x | 6 | 5.00 | 6.00 | 1.20x | 0.50x | 1.40, 2.10 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	if got, want := RunSummary(rep.Results[1]), "HTTP/1.1 8.00 s (1.00x the floor), HTTP/2 6.00 s (1.20x the floor); floors 8.00 s, 5.00 s"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	rep.Results[1].Page.HTTP2 = &PageLoad{Err: "GET /o/3: context deadline exceeded"}
	b.Reset()
	rep.RenderMarkdown(&b)
	if want := "| GEO-10/2 | scpsvpn | 8.00 | 8.00 | 1.00x | 0.50x | 6 | 5.00 | failed | | |  |"; !strings.Contains(b.String(), want) {
		t.Errorf("report.md lacks %q:\n%s", want, b.String())
	}
	if strings.Contains(md, "## Goodput") {
		t.Errorf("a page-load report shows the download tables:\n%s", md)
	}
}
