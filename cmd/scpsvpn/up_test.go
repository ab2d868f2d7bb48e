package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStartRecord: a developer's record (--cpuprofile, --trace) goes to
// the file its path names, %p being the PID, from start to stop; no path
// starts nothing, and a record that cannot start names its flag.
func TestStartRecord(t *testing.T) {
	dir := t.TempDir()
	var calls []string
	start := func(w io.Writer) error {
		calls = append(calls, "start")
		_, err := io.WriteString(w, "record")
		return err
	}
	stopRec := func() { calls = append(calls, "stop") }
	stop, err := startRecord("trace", filepath.Join(dir, "rec.%p"), start, stopRec)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b, err := os.ReadFile(filepath.Join(dir, "rec."+strconv.Itoa(os.Getpid())))
	if err != nil || string(b) != "record" {
		t.Fatalf("the record's file: %q, %v", b, err)
	}
	if strings.Join(calls, ",") != "start,stop" {
		t.Fatalf("calls %v, want start then stop", calls)
	}

	calls = nil
	stop, err = startRecord("trace", "", start, stopRec)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if len(calls) != 0 {
		t.Fatalf("no path: calls %v", calls)
	}

	failed := errors.New("already recording")
	_, err = startRecord("cpuprofile", filepath.Join(dir, "p"), func(io.Writer) error { return failed }, stopRec)
	if !errors.Is(err, failed) || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("a record that cannot start: %v", err)
	}
}
