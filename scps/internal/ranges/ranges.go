// Package ranges owns Set, a sorted set of disjoint half-open uint64
// intervals. The association uses it for received packet numbers, received
// and acknowledged stream bytes, stream data queued for retransmission and
// closed stream ids. Typical use appends at the top or removes at the
// bottom, which both run in constant time; the slice is reused, so a steady
// state allocates nothing.
package ranges

// Range is the half-open interval [Start, End).
type Range struct{ Start, End uint64 }

// Len is the number of values in r.
func (r Range) Len() uint64 { return r.End - r.Start }

// Set is a sorted list of disjoint, non-adjacent ranges. The zero value is
// an empty set.
type Set struct {
	r    []Range
	head int // r[head:] is live; the prefix is spare room from RemoveBelow
}

func (s *Set) live() []Range { return s.r[s.head:] }

// Len is the number of ranges.
func (s *Set) Len() int { return len(s.r) - s.head }

// Empty reports whether the set holds nothing.
func (s *Set) Empty() bool { return s.Len() == 0 }

// At returns the i-th range, lowest first.
func (s *Set) At(i int) Range { return s.r[s.head+i] }

// First returns the lowest range; the set must not be empty.
func (s *Set) First() Range { return s.r[s.head] }

// Last returns the highest range; the set must not be empty.
func (s *Set) Last() Range { return s.r[len(s.r)-1] }

// Clear empties the set, keeping its memory.
func (s *Set) Clear() { s.r, s.head = s.r[:0], 0 }

// search returns the index (in live) of the first range whose End >= v.
func (s *Set) search(v uint64) int {
	l := s.live()
	lo, hi := 0, len(l)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l[m].End < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Contains reports whether v is in the set.
func (s *Set) Contains(v uint64) bool {
	i := s.search(v + 1)
	l := s.live()
	return i < len(l) && l[i].Start <= v
}

// Index returns the index (for At) of the range holding v; ok is false
// when v is not in the set.
func (s *Set) Index(v uint64) (i int, ok bool) {
	i = s.search(v + 1)
	l := s.live()
	return i, i < len(l) && l[i].Start <= v
}

// Covers reports whether all of [start, end) is in the set.
func (s *Set) Covers(start, end uint64) bool {
	if start >= end {
		return true
	}
	i := s.search(start + 1)
	l := s.live()
	return i < len(l) && l[i].Start <= start && l[i].End >= end
}

// Touches reports whether some range overlaps or adjoins [start, end]:
// adding [start, end) would then merge instead of making a new range.
func (s *Set) Touches(start, end uint64) bool {
	i := s.search(start)
	l := s.live()
	return i < len(l) && l[i].Start <= end
}

// Add inserts [start, end), merging with neighbours. It reports how many
// values were new.
func (s *Set) Add(start, end uint64) (added uint64) {
	if start >= end {
		return 0
	}
	n := s.Len()
	// Fast path: at or beyond the top.
	if n == 0 || start > s.r[len(s.r)-1].End {
		s.push(Range{start, end})
		return end - start
	}
	last := &s.r[len(s.r)-1]
	if start >= last.Start {
		if end <= last.End {
			return 0
		}
		if start <= last.End {
			added = end - last.End
			last.End = end
			return added
		}
	}
	l := s.live()
	i := s.search(start) // first range with End >= start: may touch
	j := i
	added = end - start
	newStart, newEnd := start, end
	for j < len(l) && l[j].Start <= end {
		// overlap or adjacency with l[j]
		os, oe := max(l[j].Start, start), min(l[j].End, end)
		if oe > os {
			added -= oe - os
		}
		newStart = min(newStart, l[j].Start)
		newEnd = max(newEnd, l[j].End)
		j++
	}
	if i == j {
		// insert at i
		s.r = append(s.r, Range{})
		l = s.live()
		copy(l[i+1:], l[i:])
		l[i] = Range{newStart, newEnd}
		return added
	}
	l[i] = Range{newStart, newEnd}
	if j > i+1 {
		copy(l[i+1:], l[j:])
		s.r = s.r[:len(s.r)-(j-i-1)]
	}
	return added
}

func (s *Set) push(r Range) {
	if len(s.r) == cap(s.r) && s.head > 0 && s.head >= len(s.r)/2 {
		// Reclaim the space left by RemoveBelow instead of growing.
		n := copy(s.r, s.r[s.head:])
		s.r, s.head = s.r[:n], 0
	}
	s.r = append(s.r, r)
}

// Remove deletes [start, end) from the set.
func (s *Set) Remove(start, end uint64) {
	if start >= end || s.Empty() {
		return
	}
	l := s.live()
	i := s.search(start + 1) // first range with End > start
	for i < len(l) && l[i].Start < end {
		r := l[i]
		switch {
		case r.Start >= start && r.End <= end: // fully covered: delete
			copy(l[i:], l[i+1:])
			s.r = s.r[:len(s.r)-1]
			l = s.live()
			continue
		case r.Start < start && r.End > end: // split
			s.r = append(s.r, Range{})
			l = s.live()
			copy(l[i+2:], l[i+1:])
			l[i] = Range{r.Start, start}
			l[i+1] = Range{end, r.End}
			return
		case r.Start < start: // cut the top
			l[i].End = start
		default: // cut the bottom
			l[i].Start = end
		}
		i++
	}
}

// RemoveBelow deletes every value < v.
func (s *Set) RemoveBelow(v uint64) {
	for s.Len() > 0 {
		f := &s.r[s.head]
		if f.End <= v {
			s.head++
			continue
		}
		if f.Start < v {
			f.Start = v
		}
		break
	}
	if s.head == len(s.r) {
		s.r, s.head = s.r[:0], 0
	}
}

// DropLowest removes the lowest range (used to bound the set's size).
func (s *Set) DropLowest() {
	if s.Len() > 0 {
		s.head++
		if s.head == len(s.r) {
			s.r, s.head = s.r[:0], 0
		}
	}
}

// Total is the number of values in the set.
func (s *Set) Total() uint64 {
	var t uint64
	for _, r := range s.live() {
		t += r.Len()
	}
	return t
}
