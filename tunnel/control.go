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
	return startControl(e.log, e.cfg.Name, runtimeDir(), e.Status).close
}

// controlServer answers on the control sockets of one endpoint.
type controlServer struct {
	log    *slog.Logger
	status func() Status
	wg     sync.WaitGroup
	stops  []func()
}

// startControl listens on the abstract socket of TUN name and, if dir is
// not empty, on dir/control.sock. Failures are logged, never returned: the
// endpoint runs without status rather than not at all.
func startControl(log *slog.Logger, name, dir string, status func() Status) *controlServer {
	s := &controlServer{log: log, status: status}
	addr := ControlAddr(name)
	if ln, err := net.Listen("unix", addr); err != nil {
		log.Error("control socket unavailable; `scpsvpn status` cannot reach this endpoint, the tunnel runs on",
			"socket", addr, "err", controlListenError(err))
	} else {
		s.serve(ln)
		s.stops = append(s.stops, func() { ln.Close() })
	}
	if dir != "" {
		if err := s.listenFile(filepath.Join(dir, ControlSocketFile)); err != nil {
			log.Error("control socket file unavailable; the abstract socket still answers", "err", err)
		}
	}
	return s
}

// close stops listening, waits for the accept loops and removes the socket
// file if it is still ours.
func (s *controlServer) close() {
	for _, f := range s.stops {
		f()
	}
	s.wg.Wait()
}

func controlListenError(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("another process in this network namespace holds the name: %w", err)
	}
	return err
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
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix socket")
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Uid), nil
}

// ErrNoEndpoint is returned by ReadStatus when no endpoint of that name
// listens in this network namespace.
var ErrNoEndpoint = errors.New("no endpoint")

// ReadStatus fetches the status of the endpoint with TUN name running in
// the caller's network namespace.
func ReadStatus(name string) (*Status, error) {
	st, err := readStatus(ControlAddr(name))
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return nil, fmt.Errorf("%w %q in this network namespace: run status in the endpoint's namespace (ip netns exec NS scpsvpn status) or give --socket", ErrNoEndpoint, name)
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
	uid, err := peerUID(c)
	if err != nil {
		return nil, fmt.Errorf("identify the endpoint: %w", err)
	}
	if !trustedServer(uid) {
		return nil, fmt.Errorf("the socket is held by uid %d, which is not root, you, or the scpsvpn user: not trusting it", uid)
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
