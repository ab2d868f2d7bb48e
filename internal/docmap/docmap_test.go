package docmap

import (
	"slices"
	"testing"
)

func TestUnmapped(t *testing.T) {
	doc := "// The map:\n//\n//\ta.go     holds A\n//\tb.go   holds B\n// c.go is named in prose only\n"
	got := Unmapped(doc, []string{"a.go", "b.go", "c.go", "ab.go"})
	if want := []string{"c.go", "ab.go"}; !slices.Equal(got, want) {
		t.Errorf("Unmapped = %v, want %v", got, want)
	}
}
