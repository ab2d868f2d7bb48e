package docmap

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestUnmapped(t *testing.T) {
	doc := "// The map:\n//\n//\ta.go     holds A\n//\tb.go   holds B\n// c.go is named in prose only\n"
	if !HasMap(doc) || HasMap("// Package x does y.\n") {
		t.Error("HasMap does not tell a map from prose")
	}
	got := Unmapped(doc, []string{"a.go", "b.go", "c.go", "ab.go"})
	if want := []string{"c.go", "ab.go"}; !slices.Equal(got, want) {
		t.Errorf("Unmapped = %v, want %v", got, want)
	}
}

// TestDocMapsEveryFile keeps every package's map of its files complete.
// The packages known to have one must be found, so a walk that went
// wrong cannot pass empty.
func TestDocMapsEveryFile(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	maps, err := Maps(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"scps", "tunnel", "scps/internal/ackhandler", "scps/internal/streams", "cmd/internal/bench"} {
		if _, ok := maps[filepath.Join(root, dir)]; !ok {
			t.Errorf("%s/doc.go has no file map", dir)
		}
	}
	for dir, missing := range maps {
		for _, f := range missing {
			t.Errorf("%s/doc.go does not say what %s holds: add it to the map", dir, f)
		}
	}
}

func TestUnnamed(t *testing.T) {
	doc := "| `a` | x |\n| `a/b/...` | y |\n`c/d.go` in prose"
	got := Unnamed(doc, []string{"a", "a/b/c", "a/bc", "c", "e"})
	if want := []string{"a/bc", "c", "e"}; !slices.Equal(got, want) {
		t.Errorf("Unnamed = %v, want %v", got, want)
	}
}

// TestArchitectureNamesEveryPackage keeps ARCHITECTURE.md's map true: it
// names every package of the module, and every path it names exists.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"tunnel", "scps/cc", "cmd/scpsvpn"} {
		if !slices.Contains(pkgs, p) {
			t.Fatalf("Packages missed %s (found %v)", p, pkgs)
		}
	}
	for _, p := range Unnamed(string(doc), pkgs) {
		t.Errorf("ARCHITECTURE.md does not name package %s: add it to the packages' table", p)
	}
	for _, p := range Dangling(string(doc), root) {
		t.Errorf("ARCHITECTURE.md names %s, which does not exist: say where it went", p)
	}
}

// TestNothingNamedByWorkItem: no file's name or text names a numbered
// work item; name things by what they are.
func TestNothingNamedByWorkItem(t *testing.T) {
	if workItem.FindString("docs/Issue"+"11.md") == "" || workItem.FindString("the (iss"+"ue 10) fix") == "" || workItem.FindString("renderIssue"+"_4") == "" {
		t.Fatal("workItem misses a work item's number")
	}
	if workItem.FindString("a tissue 3 layers") != "" || workItem.FindString("issues/123") != "" {
		t.Fatal("workItem matches what names no work item")
	}
	found, err := WorkItemNames(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for f, m := range found {
		t.Errorf("%s names a work item (%q): name it by what it is", f, m)
	}
}

// TestLayersKeepTheirImports holds the layers' rules of ARCHITECTURE.md:
// no import runs back up (scps, stack, peers and configs know nothing of
// the tunnel, each other or cmd; the tunnel nothing of cmd), tests
// included, so none of them depends on the test bed.
func TestLayersKeepTheirImports(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	broken, err := BrokenImports(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Errorf("%s: against the layers' rules (ARCHITECTURE.md)", b)
	}
	if l, ok := layerOf("scps/internal/wire"); !ok || l.Dir != "scps" {
		t.Errorf("layerOf(scps/internal/wire) = %v, %v; want the scps layer", l, ok)
	}
	if l, _ := layerOf("scps/settings"); l.Dir != "scps/settings" || allowed("scps", l.May) {
		t.Errorf("scps/settings may import scps: %v", l)
	}
	if allowed("cmd/internal/testbed", []string{"tunnel", "stack", "scps", "peers", "configs"}) || !allowed("scps/cc", []string{"scps"}) {
		t.Error("allowed does not tell a layer below from one above")
	}
}

// TestEveryPackageSaysWhatItIs: each package opens with a comment saying
// what it is for, where a newcomer starts reading.
func TestEveryPackageSaysWhatItIs(t *testing.T) {
	missing, err := Uncommented(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range missing {
		t.Errorf("package %s has no package comment: say what it is for and where to start reading", p)
	}
}
