package scps

// This file checks that doc.go's map of the package names every source
// file, so the map stays a true guide as files come and go.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDocMapsEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		listed++
		if !strings.Contains(string(doc), "//\t"+f+" ") {
			t.Errorf("doc.go does not say what %s holds: add it to the map", f)
		}
	}
	if listed == 0 {
		t.Fatal("no source files found")
	}
}
