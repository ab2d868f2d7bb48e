package tunnel

// The control socket: `scpsvpn status` asks a running endpoint for a Status
// snapshot (one JSON document per connection).
//
// Its main address is an abstract unix socket, "@scpsvpn/<tun name>".
// Abstract names belong to the network namespace, not the filesystem, so
// two endpoints in two namespaces never collide even when both call their
// TUN "scps0", `scpsvpn status` run inside a namespace reaches that
// namespace's endpoint, and the name disappears with the process: nothing
// stale is ever left to remove. Abstract sockets have no file permissions,
// so every connection's SO_PEERCRED is checked: root and the endpoint's own
// user may read, nobody else (counters reveal peers and traffic).
//
// Under systemd (RuntimeDirectory=, which sets $RUNTIME_DIRECTORY) the
// endpoint also listens on <runtime dir>/control.sock, reachable from
// outside its namespace (`scpsvpn status --socket PATH`). A socket file
// that still answers is never removed; only a dead one is replaced.
//
// Nothing here can stop the data path: a control-socket problem is logged
// and the endpoint runs on without it.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// controlPrefix starts every endpoint's abstract control socket name.
const controlPrefix = "@scpsvpn/"

// ControlSocketFile is the socket file's name inside $RUNTIME_DIRECTORY.
const ControlSocketFile = "control.sock"

// controlTimeout bounds one status exchange on either side.
const controlTimeout = 5 * time.Second

// ControlAddr is the abstract control socket address of the endpoint with
// TUN name (Go's net package maps the leading '@' to a NUL byte).
func ControlAddr(name string) string { return controlPrefix + name }

// serveControl starts the control sockets and returns what stops them.
func (e *Endpoint) serveControl() func() {
	s := newControl(e.log, e.cfg.Name, runtimeDir(), e.Status)
	e.control.Store(s) // before a status request can ask for its state
	s.start()
	return s.close
}

// controlRetry is how often an endpoint whose abstract control socket name
// was taken tries it again: once the process holding it is gone, status
// reaches the endpoint without a restart. A variable for tests.
var controlRetry = 10 * time.Second

// controlServer answers on the control sockets of one endpoint.
type controlServer struct {
	log    *slog.Logger
	status func() Status
	addr   string // the abstract name
	dir    string // the runtime directory for the socket file; "" for none
	wg     sync.WaitGroup

	mu      sync.Mutex
	stops   []func()
	closed  bool
	done    chan struct{} // closed by close
	bound   bool          // we hold addr
	problem string        // why we do not, when not
	file    string        // the socket file we listen on, if any
}

// ControlStatus tells where `scpsvpn status` reaches the endpoint.
type ControlStatus struct {
	Socket string `json:"socket"`          // the abstract socket name, @scpsvpn/<TUN name>
	Bound  bool   `json:"bound"`           // the endpoint holds that name
	Error  string `json:"error,omitempty"` // why it does not (another process took the name first)
	File   string `json:"file,omitempty"`  // the socket file under systemd, when the endpoint listens on it
}

// startControl listens on the abstract socket of TUN name and, if dir is
// not empty, on dir/control.sock. Failures are logged, never returned: the
// endpoint runs without status rather than not at all.
func startControl(log *slog.Logger, name, dir string, status func() Status) *controlServer {
	s := newControl(log, name, dir, status)
	s.start()
	return s
}

func newControl(log *slog.Logger, name, dir string, status func() Status) *controlServer {
	return &controlServer{log: log, status: status, addr: ControlAddr(name), dir: dir, done: make(chan struct{})}
}

func (s *controlServer) start() {
	if err := s.listenAbstract(); err != nil {
		args := []any{"socket", s.addr, "err", err, "hint", controlHint(s.dir)}
		taken := errors.Is(err, syscall.EADDRINUSE)
		if taken {
			args = append(args, "retry", controlRetry)
		}
		s.log.Error("control socket unavailable; `scpsvpn status` cannot reach this endpoint by its name, the tunnel runs on", args...)
		if taken {
			s.wg.Add(1)
			go s.retryAbstract()
		}
	}
	if s.dir != "" {
		path := filepath.Join(s.dir, ControlSocketFile)
		if err := s.listenFile(path); err != nil {
			s.log.Error("control socket file unavailable; the abstract socket still answers", "err", err)
		} else {
			s.mu.Lock()
			s.file = path
			s.mu.Unlock()
		}
	}
}

// controlHint tells an operator what to do, and where else the
// endpoint's status is.
func controlHint(dir string) string {
	h := "stop the process holding the name (the endpoint takes it within " + controlRetry.String() + "); meanwhile"
	if dir != "" {
		h += " `scpsvpn status --socket " + filepath.Join(dir, ControlSocketFile) + "` and"
	}
	return h + " the metrics, if configured (scpsvpn_control_socket_bound), show the endpoint"
}

// listenAbstract listens on the abstract name; an error says who holds it.
func (s *controlServer) listenAbstract() error {
	ln, err := net.Listen("unix", s.addr)
	if err != nil {
		err = controlListenError(s.addr, err)
		s.mu.Lock()
		s.problem = err.Error()
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		ln.Close()
		return net.ErrClosed
	}
	s.bound, s.problem = true, ""
	s.serve(ln)
	s.stops = append(s.stops, func() { ln.Close() })
	return nil
}

// retryAbstract tries the abstract name again until it is ours or the
// server closes.
func (s *controlServer) retryAbstract() {
	defer s.wg.Done()
	t := time.NewTicker(controlRetry)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if err := s.listenAbstract(); err == nil {
			s.log.Info("control socket bound: the name is free again, `scpsvpn status` reaches this endpoint", "socket", s.addr)
			return
		} else if !errors.Is(err, syscall.EADDRINUSE) {
			return
		}
	}
}

// state reports where status reaches the endpoint.
func (s *controlServer) state() ControlStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ControlStatus{Socket: s.addr, Bound: s.bound, Error: s.problem, File: s.file}
}

// close stops listening, waits for the accept loops and removes the socket
// file if it is still ours.
func (s *controlServer) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	stops := s.stops
	s.mu.Unlock()
	for _, f := range stops {
		f()
	}
	s.wg.Wait()
}

// controlListenError explains a failure to listen on addr: for a name
// taken, which process holds it (any local user can bind an abstract name
// first).
func controlListenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("another process in this network namespace holds the name (%s): %w", holderOf(addr), err)
	}
	return err
}

// holderOf describes the process listening on addr, as its credentials
// tell.
func holderOf(addr string) string {
	c, err := net.DialTimeout("unix", addr, time.Second)
	if err != nil {
		return "which one is unknown: " + err.Error()
	}
	defer c.Close()
	cred, err := peerCred(c)
	if err != nil {
		return "which one is unknown: " + err.Error()
	}
	return describeProcess(cred)
}

// describeProcess names a process by its credentials: "pid 1234 (nc),
// uid 1000 (alice)".
func describeProcess(cred *unix.Ucred) string {
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cred.Pid))
	d := fmt.Sprintf("pid %d", cred.Pid)
	if c := strings.TrimSpace(string(comm)); c != "" {
		d += " (" + c + ")"
	}
	d += fmt.Sprintf(", uid %d", cred.Uid)
	if u, err := user.LookupId(strconv.Itoa(int(cred.Uid))); err == nil {
		d += " (" + u.Username + ")"
	}
	return d
}

// runtimeDir is the first directory of systemd's $RUNTIME_DIRECTORY.
func runtimeDir() string {
	d, _, _ := strings.Cut(os.Getenv("RUNTIME_DIRECTORY"), ":")
	return d
}

// listenFile listens on a socket file at path. An existing file is replaced
// only when it is a socket nobody answers on.
func (s *controlServer) listenFile(path string) error {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("%s exists and is not a socket: leaving it alone", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("%s answers: another endpoint is using it, not replacing it", path)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%s exists and its state is unknown (%v): leaving it alone", path, err)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove dead socket %s: %w", path, err)
		}
		s.log.Info("removed a dead control socket", "socket", path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen %s: %w", path, err)
	}
	// We remove the file ourselves, and only while it is still ours.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = os.Chmod(path, 0o600)
	mine, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return fmt.Errorf("stat %s: %w", path, err)
	}
	s.serve(ln)
	s.stops = append(s.stops, func() {
		ln.Close()
		if now, err := os.Lstat(path); err == nil && os.SameFile(mine, now) {
			os.Remove(path)
		}
	})
	return nil
}

// serve answers each connection on ln with one JSON document: the Status,
// or {"error": ...} for a caller that may not read it.
func (s *controlServer) serve(ln net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				// Out of file descriptors and the like: wait, the data
				// path needs them more than we do.
				s.log.Debug("control accept", "err", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			s.answer(c)
		}
	}()
}

func (s *controlServer) answer(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(controlTimeout))
	enc := json.NewEncoder(c)
	uid, err := peerUID(c)
	switch {
	case err != nil:
		_ = enc.Encode(controlError{Error: "cannot identify the caller: " + err.Error()})
	case !mayControl(uid, os.Geteuid()):
		_ = enc.Encode(controlError{Error: fmt.Sprintf("permission denied: uid %d is neither root nor the endpoint's user (uid %d)", uid, os.Geteuid())})
	default:
		_ = enc.Encode(s.status())
	}
}

type controlError struct {
	Error string `json:"error"`
}

// mayControl is the access rule: root, or the user the endpoint runs as.
func mayControl(uid, self int) bool { return uid == 0 || uid == self }

// peerUID returns the user id of the process at the other end of c.
func peerUID(c net.Conn) (int, error) {
	cred, err := peerCred(c)
	if err != nil {
		return 0, err
	}
	return int(cred.Uid), nil
}

// peerCred returns the credentials of the process at the other end of c.
func peerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket")
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	return cred, nil
}

// ErrNoEndpoint is returned by ReadStatus when no endpoint of that name
// listens in this network namespace.
var ErrNoEndpoint = errors.New("no endpoint")

// ReadStatus fetches the status of the endpoint with TUN name running in
// the caller's network namespace.
func ReadStatus(name string) (*Status, error) {
	st, err := readStatus(ControlAddr(name))
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return nil, fmt.Errorf("%w %q in this network namespace: run status in the endpoint's namespace (ip netns exec NS scpsvpn status) or give --socket; an endpoint that runs but could not bind its control socket says so in its log", ErrNoEndpoint, name)
	}
	if err != nil {
		return nil, fmt.Errorf("status of %q: %w", name, err)
	}
	return st, nil
}

// ReadStatusAt fetches a status from the control socket file at path.
func ReadStatusAt(path string) (*Status, error) {
	st, err := readStatus(path)
	if err != nil {
		return nil, fmt.Errorf("status from %s: %w", path, err)
	}
	return st, nil
}

func readStatus(addr string) (*Status, error) {
	c, err := net.DialTimeout("unix", addr, controlTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// Anyone may bind an abstract name: believe only an endpoint run by
	// root, by us, or by the scpsvpn system user.
	cred, err := peerCred(c)
	if err != nil {
		return nil, fmt.Errorf("identify the endpoint: %w", err)
	}
	if !trustedServer(int(cred.Uid)) {
		return nil, fmt.Errorf("the socket %s is held by %s, which is not root, you, or the scpsvpn user: not trusting it. "+
			"Another user took the name before the endpoint could bind it (the endpoint's log says \"control socket unavailable\"): "+
			"stop that process and the endpoint takes the name within %s; meanwhile, under systemd, "+
			"`scpsvpn status --socket /run/scpsvpn/INSTANCE/%s` and the metrics, if configured, show the endpoint",
			addr, describeProcess(cred), controlRetry, ControlSocketFile)
	}
	c.SetDeadline(time.Now().Add(controlTimeout))
	var reply struct {
		Status
		Error string `json:"error"`
	}
	if err := json.NewDecoder(c).Decode(&reply); err != nil {
		return nil, fmt.Errorf("read status: %w", err)
	}
	if reply.Error != "" {
		return nil, errors.New(reply.Error)
	}
	return &reply.Status, nil
}

// ServiceUser is the system user the packaged service runs as.
const ServiceUser = "scpsvpn"

func trustedServer(uid int) bool {
	if uid == 0 || uid == os.Geteuid() {
		return true
	}
	u, err := user.Lookup(ServiceUser)
	return err == nil && u.Uid == strconv.Itoa(uid)
}

// Endpoints lists the TUN names of the endpoints listening in the caller's
// network namespace (from /proc/net/unix, which shows this namespace's
// sockets only).
func Endpoints() ([]string, error) {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	defer f.Close()
	return parseEndpoints(f)
}

// parseEndpoints reads /proc/net/unix lines ("Num RefCount Protocol Flags
// Type St Inode Path") and keeps listening sockets named controlPrefix*.
func parseEndpoints(r io.Reader) ([]string, error) {
	const acceptCon = 0x10000 // __SO_ACCEPTCON: a listening socket
	var names []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		flags, err := strconv.ParseUint(f[3], 16, 32)
		if err != nil || flags&acceptCon == 0 {
			continue
		}
		name, ok := strings.CutPrefix(f[7], controlPrefix)
		if !ok || name == "" || seen[name] {
			continue
		}
		seen[name] = true
		names = append(names, name)
	}
	return names, sc.Err()
}
