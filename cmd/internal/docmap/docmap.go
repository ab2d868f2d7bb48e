// Package docmap checks the maps a newcomer reads: the packages' maps of
// their files (a doc.go whose comment says, for every source file, what
// it holds; scps, tunnel, scps/internal/... and cmd/internal/bench have
// one), ARCHITECTURE.md's list of packages and the paths it names, so each
// stays a true guide as files come and go; a package comment in every
// package; the layers' rules on imports (layers.go); and that nothing is
// named by a numbered work item. Its tests walk the module.
package docmap

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// Packages lists the module's package directories under root (those
// holding a .go file other than a test), relative to root, with '/'.
func Packages(root string) ([]string, error) {
	var pkgs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		files, err := sourceFiles(path)
		if err != nil {
			return err
		}
		if len(files) > 0 || hasFile(path, "doc.go") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			pkgs = append(pkgs, filepath.ToSlash(rel))
		}
		return nil
	})
	return pkgs, err
}

func hasFile(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

// codePath is a name in backquotes, as the architecture map names
// packages (`tunnel`, `scps/cc`, `scps/internal/...`) and files
// (`tunnel/io.go`).
var codePath = regexp.MustCompile("`([a-z0-9_]+(?:/[a-z0-9_.]+)*)`")

// Unnamed returns the packages of pkgs that doc (ARCHITECTURE.md) does not
// name in backquotes, itself or under a `dir/...` that covers it.
func Unnamed(doc string, pkgs []string) []string {
	named := map[string]bool{}
	var trees []string
	for _, m := range codePath.FindAllStringSubmatch(doc, -1) {
		if tree, ok := strings.CutSuffix(m[1], "/..."); ok {
			trees = append(trees, tree+"/")
		} else {
			named[m[1]] = true
		}
	}
	var missing []string
	for _, p := range pkgs {
		if named[p] || slices.ContainsFunc(trees, func(t string) bool { return strings.HasPrefix(p, t) }) {
			continue
		}
		missing = append(missing, p)
	}
	return missing
}

// Dangling returns the paths doc names in backquotes (those with a '/')
// that are not under root: a file or package that moved or went.
func Dangling(doc, root string) []string {
	var gone []string
	for _, m := range codePath.FindAllStringSubmatch(doc, -1) {
		p := strings.TrimSuffix(m[1], "/...")
		if !strings.Contains(p, "/") {
			continue // a bare word or file name: prose says where it is
		}
		if !hasFile(root, p) && !slices.Contains(gone, p) {
			gone = append(gone, p)
		}
	}
	return gone
}

// workItem is a mention of a numbered work item (the word and a number): the code
// and its documents are named by what they are, not by the work that made
// them (commit messages may name it).
// An identifier may carry it in its middle, after a lower-case letter.
var workItem = regexp.MustCompile(`(?:\b(?i:issue)|Issue)[ _-]?#?[0-9]+`)

// WorkItemNames returns, for each file under root (but .git) whose path or
// text names a numbered work item, the first such mention.
func WorkItemNames(root string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if m := workItem.FindString(filepath.ToSlash(rel)); m != "" {
			out[rel] = m
			return nil
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b[:min(len(b), 8<<10)], 0) >= 0 {
			return nil // not text (a built binary)
		}
		if !bytes.Contains(bytes.ToLower(b), []byte("issue")) {
			return nil
		}
		if m := workItem.Find(b); m != nil {
			out[rel] = string(m)
		}
		return nil
	})
	return out, err
}
