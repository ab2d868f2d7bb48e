package streams

import (
	"testing"

	"scpsvpn/internal/docmap"
)

// TestDocMapsEveryFile keeps doc.go's map of the package's files complete.
func TestDocMapsEveryFile(t *testing.T) { docmap.Check(t, ".") }
