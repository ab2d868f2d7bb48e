package bench

// This file owns the benchmark's tiny request protocol between its client
// (site A) and its server (site B). A connection opens with one request
// line; the server then either streams a download ("bulk") until the client
// goes away, or echoes fixed-size messages ("echo N": read N bytes, write N
// bytes back, repeat), or sends N bytes and closes ("get N", a small
// download of the many-flows workload). The line is read byte by byte so
// nothing after it is consumed, and anything malformed closes the
// connection.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

const (
	maxRequestLine = 32      // "echo 65536\n" fits with room to spare
	maxEchoSize    = 1 << 16 // an echo message is a small request, not a transfer
	maxGetSize     = 1 << 30 // a get is a finite download
)

// Request kinds.
const (
	modeBulk = "bulk"
	modeEcho = "echo"
	modeGet  = "get"
)

// request is a parsed request line.
type request struct {
	mode string
	size int // echo: message size; get: the download's size
}

// String renders the request line (with its newline) as the client sends it.
func (r request) String() string {
	if r.mode == modeEcho || r.mode == modeGet {
		return fmt.Sprintf("%s %d\n", r.mode, r.size)
	}
	return modeBulk + "\n"
}

var errBadRequest = errors.New("bad request line")

// parseRequest parses a request line without its newline.
func parseRequest(line []byte) (request, error) {
	if bytes.Equal(line, []byte(modeBulk)) {
		return request{mode: modeBulk}, nil
	}
	mode, limit := modeEcho, maxEchoSize
	num, ok := bytes.CutPrefix(line, []byte(modeEcho+" "))
	if !ok {
		mode, limit = modeGet, maxGetSize
		num, ok = bytes.CutPrefix(line, []byte(modeGet+" "))
	}
	if !ok {
		return request{}, fmt.Errorf("%w: %q: want %q, %q or %q", errBadRequest, line, modeBulk, modeEcho+" N", modeGet+" N")
	}
	n, err := strconv.Atoi(string(num))
	if err != nil || n < 1 || n > limit || strconv.Itoa(n) != string(num) {
		return request{}, fmt.Errorf("%w: %s size %q: want 1-%d", errBadRequest, mode, num, limit)
	}
	return request{mode: mode, size: n}, nil
}

// readRequest reads one request line from r, never past its newline.
func readRequest(r io.Reader) (request, error) {
	var buf [maxRequestLine]byte
	n := 0
	for {
		if n == len(buf) {
			return request{}, fmt.Errorf("%w: longer than %d bytes", errBadRequest, maxRequestLine)
		}
		if _, err := io.ReadFull(r, buf[n:n+1]); err != nil {
			return request{}, fmt.Errorf("reading the request line: %w", err)
		}
		if buf[n] == '\n' {
			return parseRequest(buf[:n])
		}
		n++
	}
}
