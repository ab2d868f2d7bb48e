package docmap

import (
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
)

// Module is the module path the import rules are written in.
const Module = "scpsvpn"

// Layer is one of ARCHITECTURE.md's rules on imports: the packages at or
// under Dir may import, of the module, only those at or under one of May.
type Layer struct {
	Dir string   // a package directory, relative to the root, with '/'
	May []string // package directories (and all under each) it may import
}

// Layers are ARCHITECTURE.md's rules: cmd -> tunnel -> {stack, scps,
// peers}, configs plain data beside scps/settings, and nothing of the
// library importing cmd (the test bed, the link emulator).
var Layers = []Layer{
	{Dir: "scps", May: []string{"scps"}},
	{Dir: "scps/settings", May: nil},
	{Dir: "scps/varint", May: nil},
	{Dir: "peers", May: []string{"peers"}},
	{Dir: "stack", May: []string{"stack"}},
	{Dir: "configs", May: []string{"configs", "scps/settings"}},
	{Dir: "tunnel", May: []string{"tunnel", "stack", "scps", "peers", "configs"}},
}

// layerOf returns the rule of the most specific Layer covering dir.
func layerOf(dir string) (Layer, bool) {
	var best Layer
	found := false
	for _, l := range Layers {
		if under(dir, l.Dir) && (!found || len(l.Dir) > len(best.Dir)) {
			best, found = l, true
		}
	}
	return best, found
}

// pkgFiles is a package directory (relative to the root, with '/') and
// the paths of its .go files, tests included.
type pkgFiles struct {
	dir   string
	files []string
}

// goFiles lists the module's packages under root with their .go files.
func goFiles(root string) ([]pkgFiles, error) {
	pkgs, err := Packages(root)
	if err != nil {
		return nil, err
	}
	out := make([]pkgFiles, 0, len(pkgs))
	for _, dir := range pkgs {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			return nil, err
		}
		out = append(out, pkgFiles{dir, files})
	}
	return out, nil
}

// under reports whether dir is p or inside it.
func under(dir, p string) bool { return dir == p || strings.HasPrefix(dir, p+"/") }

// BrokenImports returns, for every .go file (tests included) of the
// packages under root that a Layer covers, each import of the module the
// file's layer does not allow, as "file imports path".
func BrokenImports(root string) ([]string, error) {
	pkgs, err := goFiles(root)
	if err != nil {
		return nil, err
	}
	var broken []string
	fset := token.NewFileSet()
	for _, pkg := range pkgs {
		dir, files := pkg.dir, pkg.files
		l, ok := layerOf(dir)
		if !ok {
			continue
		}
		for _, f := range files {
			af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
			if err != nil {
				return nil, fmt.Errorf("docmap: %w", err)
			}
			for _, imp := range af.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				if err != nil {
					return nil, fmt.Errorf("docmap: %s: %w", f, err)
				}
				if !under(path, Module) {
					continue
				}
				if !allowed(strings.TrimPrefix(path, Module+"/"), l.May) {
					broken = append(broken, filepath.ToSlash(filepath.Join(dir, filepath.Base(f)))+" imports "+path)
				}
			}
		}
	}
	return broken, nil
}

func allowed(pkg string, may []string) bool {
	for _, m := range may {
		if under(pkg, m) {
			return true
		}
	}
	return false
}

// Uncommented returns the packages under root none of whose non-test
// files opens with a package comment ("// Package x ..." or, for a
// command, "// Command x ...") saying what it is for.
func Uncommented(root string) ([]string, error) {
	pkgs, err := goFiles(root)
	if err != nil {
		return nil, err
	}
	var missing []string
	fset := token.NewFileSet()
	for _, pkg := range pkgs {
		dir, files := pkg.dir, pkg.files
		found := false
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				return nil, fmt.Errorf("docmap: %w", err)
			}
			if c := af.Doc.Text(); strings.HasPrefix(c, "Package "+af.Name.Name+" ") || strings.HasPrefix(c, "Command ") {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, dir)
		}
	}
	return missing, nil
}
