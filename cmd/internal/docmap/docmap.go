// Package docmap checks the packages' maps of their files: a doc.go whose
// comment says, for every source file, what it holds (scps, tunnel and
// scps/internal/... have one), so each map stays a true guide as files
// come and go. Its test walks the module and checks every map it finds.
package docmap

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// mapLine is a line of a file map: a comment line naming a file after a tab.
var mapLine = regexp.MustCompile(`(?m)^//\t[A-Za-z0-9_]+\.go `)

// HasMap reports whether doc (a doc.go's text) holds a file map.
func HasMap(doc string) bool { return mapLine.MatchString(doc) }

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

// Maps returns, for every directory under root whose doc.go holds a file
// map, the source files (other than tests and doc.go) it leaves out.
func Maps(root string) (map[string][]string, error) {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "doc.go" {
			return nil
		}
		doc, err := os.ReadFile(path)
		if err != nil || !HasMap(string(doc)) {
			return err
		}
		dir := filepath.Dir(path)
		files, err := sourceFiles(dir)
		if err != nil {
			return err
		}
		out[dir] = Unmapped(string(doc), files)
		return nil
	})
	return out, err
}

// sourceFiles lists dir's .go files other than tests and doc.go itself.
func sourceFiles(dir string) ([]string, error) {
	all, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []string
	for _, p := range all {
		f := filepath.Base(p)
		if !strings.HasSuffix(f, "_test.go") && f != "doc.go" {
			files = append(files, f)
		}
	}
	return files, nil
}
