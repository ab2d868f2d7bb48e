// Package docmap checks a package's map of its files: the doc.go comment
// that says, for every source file, what it holds (as scps/doc.go and
// tunnel/doc.go do), so the map stays a true guide as files come and go.
package docmap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Check fails t for every non-test .go file in dir that dir/doc.go does
// not name at the start of a map line ("//<tab>file.go ").
func Check(t testing.TB, dir string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(dir, "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Unmapped(string(doc), sourceFiles(t, dir)) {
		t.Errorf("doc.go does not say what %s holds: add it to the map", f)
	}
}

// Unmapped returns the files of files that doc does not map.
func Unmapped(doc string, files []string) []string {
	var missing []string
	for _, f := range files {
		if !strings.Contains(doc, "//\t"+f+" ") {
			missing = append(missing, f)
		}
	}
	return missing
}

// sourceFiles lists dir's .go files other than tests and doc.go itself,
// and fails t if there are none (a wrong dir would pass vacuously).
func sourceFiles(t testing.TB, dir string) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, p := range all {
		f := filepath.Base(p)
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no source files in %s", dir)
	}
	return files
}
