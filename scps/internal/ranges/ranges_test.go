package ranges

// This file checks Set against a bitmap model.

import (
	"math/rand/v2"
	"testing"
)

// check compares s with a bitmap model and verifies the invariants.
func check(t *testing.T, s *Set, model []bool) {
	t.Helper()
	for i := 0; i < s.Len(); i++ {
		r := s.At(i)
		if r.Start >= r.End {
			t.Fatalf("empty range %+v", r)
		}
		if i > 0 && s.At(i-1).End >= r.Start {
			t.Fatalf("ranges %+v and %+v overlap or touch", s.At(i-1), r)
		}
	}
	var total uint64
	for v, in := range model {
		if s.Contains(uint64(v)) != in {
			t.Fatalf("Contains(%d) = %v, model %v; set %v", v, !in, in, s.live())
		}
		if in {
			total++
		}
	}
	if s.Total() != total {
		t.Fatalf("Total %d, model %d", s.Total(), total)
	}
}

func TestSetAgainstModel(t *testing.T) {
	const size = 300
	for seed := uint64(0); seed < 50; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		var s Set
		model := make([]bool, size)
		for op := 0; op < 400; op++ {
			a := uint64(r.IntN(size))
			b := a + uint64(r.IntN(30))
			if b > size {
				b = size
			}
			switch r.IntN(6) {
			case 0, 1, 2:
				var added uint64
				for v := a; v < b; v++ {
					if !model[v] {
						added++
					}
					model[v] = true
				}
				if got := s.Add(a, b); got != added {
					t.Fatalf("Add(%d,%d) = %d, want %d", a, b, got, added)
				}
			case 3:
				s.Remove(a, b)
				for v := a; v < b; v++ {
					model[v] = false
				}
			case 4:
				s.RemoveBelow(a)
				for v := uint64(0); v < a; v++ {
					model[v] = false
				}
			case 5:
				covers := true
				for v := a; v < b; v++ {
					covers = covers && model[v]
				}
				if s.Covers(a, b) != covers {
					t.Fatalf("Covers(%d,%d) = %v", a, b, !covers)
				}
				if !s.Empty() && r.IntN(2) == 0 {
					f := s.First()
					s.DropLowest()
					for v := f.Start; v < f.End; v++ {
						model[v] = false
					}
				}
			}
			check(t, &s, model)
		}
	}
}

func TestAppendAtTopAllocatesNothing(t *testing.T) {
	var s Set
	for i := uint64(0); i < 100; i++ {
		s.Add(2*i, 2*i+1)
	}
	i := uint64(100)
	allocs := testing.AllocsPerRun(1000, func() {
		s.Add(2*i, 2*i+1)
		s.RemoveBelow(2*i - 150)
		i++
	})
	if allocs > 0 {
		t.Errorf("%v allocations per add/remove", allocs)
	}
}
