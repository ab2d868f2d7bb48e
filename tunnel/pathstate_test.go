package tunnel

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"scpsvpn/configs"
	"scpsvpn/peers"
	"scpsvpn/scps/cc"
)

// TestPathStateSavedAndLoaded: what an association learned of its peer's
// path is written to state_dir when the endpoint stops, read back when it
// starts again, and the next association to that peer resumes from it.
func TestPathStateSavedAndLoaded(t *testing.T) {
	h, a, b := twoSites(t)
	b.echo(7)
	c := openEcho(t, a, "10.2.0.5:7")
	if err := echoCheck(c, 1<<20); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(b.stateDir, b.ep.cfg.Name+pathFileSuffix)
	if b.ep.paths.file != file {
		t.Fatalf("state file %q, want %q (state_dir, then the interface's name)", b.ep.paths.file, file)
	}
	b.stop()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no state file after the stop: %v", err)
	}
	m, err := parsePathState(raw)
	if err != nil {
		t.Fatalf("state file does not parse: %v\n%s", err, raw)
	}
	keyA := [32]byte(a.priv.PublicKey())
	saved, ok := m[pathKey{peer: keyA}]
	if !ok || saved.Rate <= 0 || saved.MinRTT <= 0 || time.Since(saved.At) > time.Minute {
		t.Fatalf("state file holds %+v for a (found %v), want a rate, an RTT and a fresh time:\n%s", saved, ok, raw)
	}
	h.wire.SetFilter(nil)
	b.start(b.peer(a))
	if got, ok := b.ep.paths.get(keyA, time.Now()); !ok || got.Rate != float64(uint64(saved.Rate)) {
		t.Fatalf("after the restart b holds %+v (%v), the file said %+v", got, ok, saved)
	}
	b.waitLog("resuming at the path saved", nil)
	openEcho(t, a, "10.2.0.5:7")
}

// TestPathStateNoDir: a state_dir that does not exist costs the
// persistence, not the start.
func TestPathStateNoDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	var logs bytes.Buffer
	s := openPathStore(dir, "scps0", slog.New(slog.NewTextHandler(&logs, nil)))
	if s.file != "" || !bytes.Contains(logs.Bytes(), []byte("not kept across restarts")) {
		t.Fatalf("file %q, logs %q", s.file, logs.String())
	}
	var k [32]byte
	s.put(k, cc.PathState{Rate: 1e6, MinRTT: time.Second, At: time.Now()})
	s.save()
	if _, ok := s.get(k, time.Now()); !ok {
		t.Fatal("kept in memory: want the entry")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("state_dir created: %v", err)
	}
}

// TestPathStateSavesInOrder: saves that overlap (the timers' and the one
// at shutdown) write one after the other, so the file ends with the last
// state put; one that fails ends the persistence for all, under the
// race detector without a race.
func TestPathStateSavesInOrder(t *testing.T) {
	dir := t.TempDir()
	s := openPathStore(dir, "scps0", slog.New(slog.DiscardHandler))
	var k [32]byte
	now := time.Now().Truncate(time.Second)
	var wg sync.WaitGroup
	for i := range 50 {
		// Each put lowers the rate with Retreated set, which replaces
		// the saved one: the last put is the file's entry.
		s.put(k, cc.PathState{Rate: float64(1e6 - i), MinRTT: time.Second, At: now, Retreated: true})
		wg.Add(1)
		go func() { defer wg.Done(); s.save() }()
	}
	wg.Wait()
	s.save()
	loaded := openPathStore(dir, "scps0", slog.New(slog.DiscardHandler))
	if p, ok := loaded.get(k, now); !ok || p.Rate != 1e6-49 {
		t.Errorf("file after overlapping saves: %+v, %v; want the rate last put, %v", p, ok, 1e6-49)
	}
	// The directory gone, the saves fail, and the first to fail ends
	// the persistence while others read the file's name.
	os.RemoveAll(dir)
	for i := range 20 {
		s.put(k, cc.PathState{Rate: float64(1e5 - i), MinRTT: time.Second, At: now, Retreated: true})
		wg.Add(1)
		go func() { defer wg.Done(); s.save() }()
	}
	wg.Wait()
	if s.mu.Lock(); s.file != "" {
		t.Errorf("after failed saves the store still writes %s", s.file)
	}
	s.mu.Unlock()
}

// TestPathStateKeepsBetterRate: an association that carried little does
// not replace a fresh, higher saved rate on the same path; one that
// retreated from it does.
func TestPathStateKeepsBetterRate(t *testing.T) {
	s := openPathStore("", "scps0", slog.New(slog.DiscardHandler))
	var k [32]byte
	now := time.Now()
	s.put(k, cc.PathState{Rate: 1e6, MinRTT: 600 * time.Millisecond, At: now})
	s.put(k, cc.PathState{Rate: 1e4, MinRTT: 610 * time.Millisecond, At: now.Add(time.Second)})
	if p, _ := s.get(k, now); p.Rate != 1e6 || !p.At.Equal(now.Add(time.Second)) {
		t.Fatalf("after a smaller sample: %+v, want the rate kept and its time refreshed", p)
	}
	s.put(k, cc.PathState{Rate: 2e5, MinRTT: 600 * time.Millisecond, At: now, Retreated: true})
	if p, _ := s.get(k, now); p.Rate != 2e5 {
		t.Fatalf("after a retreat: %+v, want the new rate", p)
	}
}

// TestPathStateFileRoundTrip: marshal then parse gives the entries back
// (rates in whole bytes/s, RTTs in microseconds, times in seconds).
func TestPathStateFileRoundTrip(t *testing.T) {
	k1, _ := peers.GeneratePrivateKey()
	k2, _ := peers.GeneratePrivateKey()
	at := time.Unix(1_700_000_000, 0)
	m := map[pathKey]cc.PathState{
		{peer: [32]byte(k1.PublicKey())}: {Rate: 1_250_000, MinRTT: 601 * time.Millisecond, Loss: 0.01, At: at},
		{peer: [32]byte(k2.PublicKey())}: {Rate: 8000, MinRTT: 40 * time.Millisecond, At: at},
	}
	got, err := parsePathState(marshalPathState(m))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(m) {
		t.Fatalf("%d entries, want %d", len(got), len(m))
	}
	for k, want := range m {
		if p := got[k]; p.Rate != want.Rate || p.MinRTT != want.MinRTT || p.Loss != want.Loss || !p.At.Equal(want.At) {
			t.Errorf("entry %+v, want %+v", p, want)
		}
	}
	for _, bad := range []string{
		"",
		"scpsvpn-paths 3\n",
		pathFileHeader,
		pathFileHeader + "\nAAAA 1 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 0 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " -1 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 01 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 0 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 1000001 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 0 0\n" + lineFor(k1) + " 1 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 0 0",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 0 0 geo\n",
		pathFileHeaderV2 + "\n" + lineFor(k1) + " 1 1 0 0 ge/o\n",
		pathFileHeaderV2 + "\n" + lineFor(k1) + " 1 1 0 0 geo extra\n",
		pathFileHeaderV2 + "\n" + lineFor(k1) + " 1 1 0 0 geo\n" + lineFor(k1) + " 1 1 0 0 geo\n",
	} {
		if _, err := parsePathState([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func lineFor(k peers.Key) string { return k.PublicKey().String() }

// TestPathStateNamedPaths: the configured paths after the first are kept
// by name beside the association's entry of the same peer, written as
// version 2 only when there are such, and read back.
func TestPathStateNamedPaths(t *testing.T) {
	k, _ := peers.GeneratePrivateKey()
	peer := [32]byte(k.PublicKey())
	at := time.Unix(1_700_000_000, 0)
	s := openPathStore("", "scps0", slog.New(slog.DiscardHandler))
	s.put(peer, cc.PathState{Rate: 9e6, MinRTT: 40 * time.Millisecond, At: at})
	if b := marshalPathState(s.m); !bytes.HasPrefix(b, []byte(pathFileHeader+"\n")) {
		t.Errorf("no named path, written as %q: want version 1", b)
	}
	s.putPath(pathKey{peer: peer, path: "geo"}, cc.PathState{Rate: 1.2e6, MinRTT: 600 * time.Millisecond, Loss: 0.01, At: at})
	b := marshalPathState(s.m)
	if !bytes.HasPrefix(b, []byte(pathFileHeaderV2+"\n")) || !bytes.Contains(b, []byte(" geo\n")) {
		t.Fatalf("written as %q: want version 2 with the path's name", b)
	}
	m, err := parsePathState(b)
	if err != nil {
		t.Fatal(err)
	}
	if p := m[pathKey{peer: peer, path: "geo"}]; p.Rate != 1.2e6 || p.MinRTT != 600*time.Millisecond {
		t.Errorf("geo read back as %+v", p)
	}
	if p := m[pathKey{peer: peer}]; p.Rate != 9e6 || p.MinRTT != 40*time.Millisecond {
		t.Errorf("the association's entry read back as %+v", p)
	}
	if p, ok := s.getPath(pathKey{peer: peer, path: "geo"}, at); !ok || p.Rate != 1.2e6 {
		t.Errorf("getPath: %+v %v", p, ok)
	}
	if _, ok := s.getPath(pathKey{peer: peer, path: "lte"}, at); ok {
		t.Error("a path never saved is found")
	}
}

// FuzzParsePathState: any bytes in the state file are refused with an
// error or parse to entries that write back and parse to the same.
func FuzzParsePathState(f *testing.F) {
	k, _ := peers.GeneratePrivateKey()
	f.Add([]byte(pathFileHeader + "\n" + lineFor(k) + " 1250000 601000 10000 1700000000\n"))
	f.Add([]byte(pathFileHeader + "\n"))
	f.Add([]byte(pathFileHeaderV2 + "\n" + lineFor(k) + " 1250000 601000 10000 1700000000 geo\n" + lineFor(k) + " 1250000 40000 0 1700000000\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parsePathState(b)
		if err != nil {
			return
		}
		again, err := parsePathState(marshalPathState(m))
		if err != nil {
			t.Fatalf("written back, does not parse: %v", err)
		}
		if len(again) != len(m) {
			t.Fatalf("%d entries, then %d", len(m), len(again))
		}
		for key, p := range m {
			if q := again[key]; q != p {
				t.Fatalf("entry %+v became %+v", p, q)
			}
		}
	})
}

// TestPathOptionsResume: a peer's configured paths after the first start
// from what was saved of each by name; the first (the association's, scps
// Config.Resume) and a path never saved start afresh.
func TestPathOptionsResume(t *testing.T) {
	k, _ := peers.GeneratePrivateKey()
	store := openPathStore("", "scps0", slog.New(slog.DiscardHandler))
	a := &assoc{e: &Endpoint{paths: store}, log: slog.New(slog.DiscardHandler)}
	a.cfg.PublicKey = k.PublicKey()
	a.cfg.Paths = []configs.PathConfig{{Name: "leo"}, {Name: "geo"}, {Name: "lte"}}
	now := time.Now()
	geo := cc.PathState{Rate: 1.2e6, MinRTT: 600 * time.Millisecond, At: now}
	store.putPath(pathKey{peer: [32]byte(a.cfg.PublicKey), path: "geo"}, geo)
	store.putPath(pathKey{peer: [32]byte(a.cfg.PublicKey), path: "leo"}, cc.PathState{Rate: 9e6, MinRTT: 40 * time.Millisecond, At: now})
	opts := a.pathOptions(false)
	if len(opts) != 3 {
		t.Fatalf("%d paths", len(opts))
	}
	if opts[0].Resume.Saved.Rate != 0 || opts[2].Resume.Saved.Rate != 0 {
		t.Errorf("first path %+v, never saved %+v: want no saved state", opts[0].Resume, opts[2].Resume)
	}
	if got := opts[1].Resume.Saved; got.Rate != geo.Rate || got.MinRTT != geo.MinRTT {
		t.Errorf("geo resumes from %+v, want %+v", got, geo)
	}
}

// TestPathOptionsRTT: a configured path's RTT is its own only when its
// [peer.path.link] says it; else the association judges its first
// silence with patience (scps PathOptions.UntoldRTT). A side that learns
// its paths marks its first one learned.
func TestPathOptionsRTT(t *testing.T) {
	store := openPathStore("", "scps0", slog.New(slog.DiscardHandler))
	a := &assoc{e: &Endpoint{paths: store}, log: slog.New(slog.DiscardHandler)}
	a.cfg.Link.RTT = 60 * time.Millisecond
	a.cfg.Paths = []configs.PathConfig{
		{Name: "leo", Link: configs.LinkConfig{RTT: 40 * time.Millisecond}},
		{Name: "geo", Link: configs.LinkConfig{RTT: configs.DefaultRTT}, RTTUntold: true},
	}
	opts := a.pathOptions(false)
	if len(opts) != 2 || opts[0].UntoldRTT || opts[0].InitialRTT != 40*time.Millisecond || !opts[1].UntoldRTT {
		t.Errorf("paths %+v: want leo's 40 ms told, geo's untold", opts)
	}
	a.cfg.Paths = nil
	if opts := a.pathOptions(true); len(opts) != 1 || !opts[0].Learned {
		t.Errorf("learning side's paths %+v: want path 0 learned", opts)
	}
}
