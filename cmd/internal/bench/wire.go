package bench

// This file owns the benchmark's tiny request protocol between its client
// (site A) and its server (site B). A connection opens with one request
// line; the server then either streams a download ("bulk") until the client
// goes away, or echoes fixed-size messages ("echo N": read N bytes, write N
// bytes back, repeat). The line is read byte by byte so nothing after it is
// consumed, and anything malformed closes the connection.

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
)

// Request kinds.
const (
	modeBulk = "bulk"
	modeEcho = "echo"
)

// request is a parsed request line.
type request struct {
	mode string
	size int // echo: message size
}

// String renders the request line (with its newline) as the client sends it.
func (r request) String() string {
	if r.mode == modeEcho {
		return fmt.Sprintf("%s %d\n", modeEcho, r.size)
	}
	return modeBulk + "\n"
}

var errBadRequest = errors.New("bad request line")

// parseRequest parses a request line without its newline.
func parseRequest(line []byte) (request, error) {
	if bytes.Equal(line, []byte(modeBulk)) {
		return request{mode: modeBulk}, nil
	}
	num, ok := bytes.CutPrefix(line, []byte(modeEcho+" "))
	if !ok {
		return request{}, fmt.Errorf("%w: %q: want %q or %q", errBadRequest, line, modeBulk, modeEcho+" N")
	}
	n, err := strconv.Atoi(string(num))
	if err != nil || n < 1 || n > maxEchoSize || strconv.Itoa(n) != string(num) {
		return request{}, fmt.Errorf("%w: echo size %q: want 1-%d", errBadRequest, num, maxEchoSize)
	}
	return request{mode: modeEcho, size: n}, nil
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
