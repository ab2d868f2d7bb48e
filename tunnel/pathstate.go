package tunnel

// This file keeps what each association learned of its peer's path (the
// delivery rate, the minimum RTT, the loss: scps/cc PathState) so the next
// association to that peer starts from it (careful resume,
// docs/careful-resume.md): in memory across re-keys and new associations,
// and in a file in [interface] state_dir across restarts. The file is
// keyed by the peer's public key and, for a peer's configured paths after
// the first ([[peer.path]], docs/multipath.md), the path's name: the
// first path's state is the association's. It is written atomically (a temporary file
// renamed over it), bounded (maxPathEntries, maxPathFile) and parsed
// strictly: a file that does not parse is ignored whole, with one log
// line. A state_dir that is missing or not writable costs the persistence
// only, never the start.

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"scpsvpn/configs"
	"scpsvpn/scps/cc"
)

const (
	// pathFileSuffix ends the state file's name in state_dir, after the
	// interface's name: endpoints of one host (scpsvpn@NAME units) share
	// the directory, each with a file of its own.
	pathFileSuffix = ".paths"
	// pathFileHeader is its first line: the format and its version.
	// Version 2 adds a sixth field to some lines, the path's name;
	// a file without named entries is written as version 1.
	pathFileHeader   = "scpsvpn-paths 1"
	pathFileHeaderV2 = "scpsvpn-paths 2"
	// maxPathEntries bounds the file and the map: more peers than a
	// configuration holds in practice; the oldest entries go first.
	maxPathEntries = 1024
	// maxPathFile is the most of the file read (its entries are under
	// 100 bytes each).
	maxPathFile = 128 << 10
	// pathSaveEvery is how often the endpoint records its associations'
	// paths and writes the file if something changed.
	pathSaveEvery = 10 * time.Second
)

// pathKey names a saved path: the peer's public key, and the name of one
// of its configured paths ("" for the association's own: a single path,
// or the first of several).
type pathKey struct {
	peer [32]byte
	path string
}

// pathStore is the per-peer path state, safe for concurrent use.
type pathStore struct {
	log   *slog.Logger
	file  string // "" when there is no persistence
	mu    sync.Mutex
	m     map[pathKey]cc.PathState
	dirty bool
	// saving orders saves (the timers' and the one at shutdown may
	// overlap): each takes its snapshot and writes it before the next
	// takes its own, so an older snapshot never replaces a newer one.
	saving sync.Mutex
}

// openPathStore loads the state file of interface name in dir. A missing
// or unusable dir is logged once and leaves the store in memory only.
func openPathStore(dir, name string, log *slog.Logger) *pathStore {
	s := &pathStore{log: log, m: map[pathKey]cc.PathState{}}
	if dir == "" {
		return s
	}
	if err := checkWritableDir(dir); err != nil {
		log.Warn("path state is not kept across restarts: interface.state_dir is not a writable directory", "state_dir", dir, "err", err)
		return s
	}
	s.file = filepath.Join(dir, filepath.Base(name)+pathFileSuffix)
	b, err := readBounded(s.file, maxPathFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		log.Warn("path state file not read: starting without it", "file", s.file, "err", err)
	default:
		m, err := parsePathState(b)
		if err != nil {
			log.Warn("path state file ignored: starting without it", "file", s.file, "err", err)
			break
		}
		s.m = m
		log.Debug("path state loaded", "file", s.file, "peers", len(m))
	}
	return s
}

// checkWritableDir reports whether dir is a directory we can create files in.
func checkWritableDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// readBounded reads at most limit bytes of name; a longer file is an error.
func readBounded(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("longer than %d bytes", limit)
	}
	return b, nil
}

// get returns the usable saved path to the peer with key.
func (s *pathStore) get(key [32]byte, now time.Time) (cc.PathState, bool) {
	return s.getPath(pathKey{peer: key}, now)
}

// getPath returns the usable saved state of the path k.
func (s *pathStore) getPath(k pathKey, now time.Time) (cc.PathState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.m[k]
	return p, ok && p.Usable(now)
}

// put records an association's path to the peer with key. A lower rate
// replaces the saved one only when the saved one has expired, the path's
// RTT changed, or the association retreated from it (the path proved
// different): an association that carried little measures less than the
// path gives, and must not spoil the next one's start.
func (s *pathStore) put(key [32]byte, p cc.PathState) { s.putPath(pathKey{peer: key}, p) }

// putPath is put for the path k.
func (s *pathStore) putPath(key pathKey, p cc.PathState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[key]; ok && old.Usable(p.At) && !p.Retreated && p.Rate < old.Rate &&
		p.MinRTT < 2*old.MinRTT && old.MinRTT < 2*p.MinRTT {
		// Keep the better rate, refresh its age.
		old.At = p.At
		p = old
	}
	if _, ok := s.m[key]; !ok && len(s.m) >= maxPathEntries {
		s.evictOldestLocked()
	}
	p.Retreated = false
	s.m[key] = p
	s.dirty = true
}

func (s *pathStore) evictOldestLocked() {
	var oldest pathKey
	first := true
	for k, v := range s.m {
		if first || v.At.Before(s.m[oldest].At) {
			oldest, first = k, false
		}
	}
	delete(s.m, oldest)
}

// save writes the file if something changed since the last write.
func (s *pathStore) save() {
	s.saving.Lock()
	defer s.saving.Unlock()
	s.mu.Lock()
	file := s.file
	if file == "" || !s.dirty {
		s.mu.Unlock()
		return
	}
	b := marshalPathState(s.m)
	s.dirty = false
	s.mu.Unlock()
	if err := writeAtomic(file, b); err != nil {
		s.mu.Lock()
		if s.file != "" {
			s.log.Warn("path state not saved: no longer kept across restarts", "file", s.file, "err", err)
			s.file = ""
		}
		s.mu.Unlock()
	}
}

// writeAtomic replaces name with b: a reader sees the old file or the new,
// never a part.
func writeAtomic(name string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// marshalPathState renders the entries, one line each after the header:
// the peer's public key (base64), the rate in bytes/s, the minimum RTT in
// microseconds, the loss in parts per million, the time observed in Unix
// seconds and, for a named path, its name (then the header says version
// 2).
func marshalPathState(m map[pathKey]cc.PathState) []byte {
	keys := make([]pathKey, 0, len(m))
	header := pathFileHeader
	for k := range m {
		keys = append(keys, k)
		if k.path != "" {
			header = pathFileHeaderV2
		}
	}
	slices.SortFunc(keys, func(a, b pathKey) int {
		if c := bytes.Compare(a.peer[:], b.peer[:]); c != 0 {
			return c
		}
		return strings.Compare(a.path, b.path)
	})
	var b bytes.Buffer
	b.WriteString(header + "\n")
	for _, k := range keys {
		p := m[k]
		fmt.Fprintf(&b, "%s %d %d %d %d", base64.StdEncoding.EncodeToString(k.peer[:]),
			uint64(p.Rate), p.MinRTT.Microseconds(), uint64(math.Round(p.Loss*1e6)), p.At.Unix())
		if k.path != "" {
			b.WriteString(" " + k.path)
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// Bounds a parsed entry must keep.
const (
	maxSavedRate   = 1 << 40 // bytes/s: 8 Tbit/s
	maxSavedRTT    = int64(time.Minute / time.Microsecond)
	maxSavedLossPP = 1_000_000
)

// parsePathState parses a state file strictly: the header, then at most
// maxPathEntries lines of five fields in range (six in version 2, the
// last a path name), no key twice.
func parsePathState(b []byte) (map[pathKey]cc.PathState, error) {
	if len(b) > maxPathFile {
		return nil, fmt.Errorf("longer than %d bytes", maxPathFile)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 256), 256)
	if !sc.Scan() || sc.Text() != pathFileHeader && sc.Text() != pathFileHeaderV2 {
		return nil, fmt.Errorf("first line is not %q or %q", pathFileHeader, pathFileHeaderV2)
	}
	named := sc.Text() == pathFileHeaderV2
	m := map[pathKey]cc.PathState{}
	for line := 2; sc.Scan(); line++ {
		if len(m) >= maxPathEntries {
			return nil, fmt.Errorf("more than %d entries", maxPathEntries)
		}
		k, p, err := parsePathLine(sc.Text(), named)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("line %d: peer key twice", line)
		}
		m[k] = p
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		return nil, errors.New("last line unterminated")
	}
	return m, nil
}

func parsePathLine(s string, named bool) (k pathKey, p cc.PathState, err error) {
	f := strings.Split(s, " ")
	switch {
	case named && len(f) == 6:
		if !configs.ValidPathName(f[5]) {
			return k, p, fmt.Errorf("field 6: %q is not a path name", f[5])
		}
		k.path = f[5]
	case len(f) != 5:
		if named {
			return k, p, fmt.Errorf("%d fields, want 5 or 6", len(f))
		}
		return k, p, fmt.Errorf("%d fields, want 5", len(f))
	}
	key, err := base64.StdEncoding.Strict().DecodeString(f[0])
	if err != nil || len(key) != 32 {
		return k, p, errors.New("not a base64 public key")
	}
	copy(k.peer[:], key)
	var v [4]int64
	limits := [4]int64{maxSavedRate, maxSavedRTT, maxSavedLossPP, math.MaxInt64 / 2}
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil || n < 0 || n > limits[i] || strconv.FormatInt(n, 10) != f[i+1] {
			return k, p, fmt.Errorf("field %d: %q is not an integer in 0..%d", i+2, f[i+1], limits[i])
		}
		v[i] = n
	}
	if v[0] == 0 || v[1] == 0 {
		return k, p, errors.New("zero rate or RTT")
	}
	p = cc.PathState{Rate: float64(v[0]), MinRTT: time.Duration(v[1]) * time.Microsecond,
		Loss: float64(v[2]) / 1e6, At: time.Unix(v[3], 0)}
	return k, p, nil
}

// savePaths records every current association's path and writes the
// file if that changed it.
func (e *Endpoint) savePaths() {
	for _, a := range e.assocList() {
		if cur := a.current(); cur != nil {
			a.observePath(cur)
		}
	}
	e.paths.save()
}

// observePath records what association as learned of the peer's path,
// and of each configured path after the first by its name.
func (a *assoc) observePath(as *association) {
	if p, ok := as.sess.PathState(); ok {
		a.e.paths.put(a.cfg.PublicKey, p)
	}
	for i := 1; i < len(a.cfg.Paths); i++ {
		if p, ok := as.sess.PathStateOf(i); ok {
			a.e.paths.putPath(pathKey{peer: a.cfg.PublicKey, path: a.cfg.Paths[i].Name}, p)
		}
	}
}

// resumeFrom is the careful resume a new association to the peer starts
// with: the saved path, if any is usable, and rtt, the handshake's round
// trip if known.
func (a *assoc) resumeFrom(rtt time.Duration) cc.Resume {
	p, ok := a.e.paths.get(a.cfg.PublicKey, time.Now())
	if !ok {
		return cc.Resume{}
	}
	return cc.Resume{Saved: p, RTT: rtt}
}
