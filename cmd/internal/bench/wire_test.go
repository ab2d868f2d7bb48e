package bench

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		line string
		want request
		ok   bool
	}{
		{"bulk", request{mode: modeBulk}, true},
		{"echo 100", request{mode: modeEcho, size: 100}, true},
		{"echo 65536", request{mode: modeEcho, size: 65536}, true},
		{"echo 65537", request{}, false},
		{"echo 0", request{}, false},
		{"echo -1", request{}, false},
		{"echo +5", request{}, false},
		{"echo 007", request{}, false},
		{"echo", request{}, false},
		{"echo  5", request{}, false},
		{"get 30000", request{mode: modeGet, size: 30000}, true},
		{"get 1073741824", request{mode: modeGet, size: maxGetSize}, true},
		{"get 1073741825", request{}, false},
		{"get 0", request{}, false},
		{"get", request{}, false},
		{"BULK", request{}, false},
		{"bulk ", request{}, false},
		{"", request{}, false},
	} {
		got, err := parseRequest([]byte(tc.line))
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("parseRequest(%q) = %+v, %v; want %+v ok=%v", tc.line, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, errBadRequest) {
			t.Errorf("parseRequest(%q): %v is not errBadRequest", tc.line, err)
		}
	}
}

func TestReadRequestStopsAtNewline(t *testing.T) {
	r := strings.NewReader("echo 3\nabcrest")
	req, err := readRequest(r)
	if err != nil || req != (request{mode: modeEcho, size: 3}) {
		t.Fatalf("readRequest = %+v, %v", req, err)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "abcrest" {
		t.Errorf("consumed past the newline: rest %q", rest)
	}
	if _, err := readRequest(strings.NewReader(strings.Repeat("x", 100))); !errors.Is(err, errBadRequest) {
		t.Errorf("an overlong line: %v", err)
	}
	if _, err := readRequest(strings.NewReader("bulk")); !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		t.Errorf("a line cut short: %v", err)
	}
}

func TestRequestRoundTrip(t *testing.T) {
	for _, req := range []request{{mode: modeBulk}, {mode: modeEcho, size: 1}, {mode: modeEcho, size: maxEchoSize}, {mode: modeGet, size: 1}, {mode: modeGet, size: maxGetSize}} {
		got, err := readRequest(strings.NewReader(req.String()))
		if err != nil || got != req {
			t.Errorf("%q read back as %+v, %v", req.String(), got, err)
		}
	}
}

// FuzzReadRequest: the server reads request lines from the network; any
// input is parsed or refused, never a panic, never read past its newline,
// and what is accepted renders back to the same line.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{"bulk\n", "echo 100\n", "echo 65536\n", "echo 0\n", "echo 99999999999999999999\n", "get 30000\n", "bulk", "\n", "echo \n", "bulk\nbulk\n", "\x00\xff\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		req, err := readRequest(r)
		consumed := len(data) - r.Len()
		if consumed > maxRequestLine {
			t.Fatalf("read %d bytes, more than a request line", consumed)
		}
		if err != nil {
			return
		}
		if i := bytes.IndexByte(data, '\n'); i+1 != consumed {
			t.Fatalf("consumed %d bytes, the newline is at %d", consumed, i)
		}
		if req.String() != string(data[:consumed]) {
			t.Fatalf("accepted %q but renders %q", data[:consumed], req.String())
		}
		if req.mode == modeEcho && (req.size < 1 || req.size > maxEchoSize) || req.mode == modeGet && (req.size < 1 || req.size > maxGetSize) {
			t.Fatalf("accepted %s size %d", req.mode, req.size)
		}
	})
}
