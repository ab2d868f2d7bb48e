package docmap

import (
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
	for _, dir := range []string{"scps", "tunnel", "scps/internal/ackhandler", "scps/internal/streams"} {
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
