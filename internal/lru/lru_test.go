package lru

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// walk returns the list front to back, checking the back-to-front links
// agree and that there is no cycle.
func walk(t *testing.T, l *List) []int32 {
	t.Helper()
	var fwd []int32
	for s := l.Front(); s != None; s = l.Next(s) {
		fwd = append(fwd, s)
		if len(fwd) > l.Slots() {
			t.Fatal("cycle in the list")
		}
	}
	var back []int32
	for s := l.Back(); s != None; s = l.Prev(s) {
		back = append(back, s)
		if len(back) > l.Slots() {
			t.Fatal("cycle in the back links")
		}
	}
	slices.Reverse(back)
	if !slices.Equal(fwd, back) {
		t.Fatalf("forward %v, backward %v", fwd, back)
	}
	return fwd
}

// TestListModel is a property test: random operations on a List and on a
// plain slice (the model) leave both in the same order, with the same
// length and membership.
func TestListModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		l := NewList(rng.IntN(8))
		var model []int32 // front first
		for step := range 3000 {
			if rng.IntN(50) == 0 {
				l.AddSlot()
			}
			if l.Slots() == 0 {
				continue
			}
			s := int32(rng.IntN(l.Slots()))
			in := slices.Contains(model, s)
			if got := l.Contains(s); got != in {
				t.Fatalf("seed %d step %d: Contains(%d)=%v want %v", seed, step, s, got, in)
			}
			switch op := rng.IntN(5); {
			case !in && op < 2:
				l.PushFront(s)
				model = slices.Insert(model, 0, s)
			case !in:
				l.PushBack(s)
				model = append(model, s)
			case op < 2:
				l.Remove(s)
				model = slices.DeleteFunc(model, func(x int32) bool { return x == s })
			case op < 4:
				l.MoveToFront(s)
				model = slices.DeleteFunc(model, func(x int32) bool { return x == s })
				model = slices.Insert(model, 0, s)
			default:
				if rng.IntN(100) == 0 {
					n := l.Slots()
					l.Reset()
					l.Grow(n)
					model = model[:0]
				}
			}
			if got := walk(t, l); !slices.Equal(got, model) || l.Len() != len(model) {
				t.Fatalf("seed %d step %d: list %v (len %d), model %v", seed, step, got, l.Len(), model)
			}
			front, back := None, None
			if len(model) > 0 {
				front, back = model[0], model[len(model)-1]
			}
			if l.Front() != front || l.Back() != back {
				t.Fatalf("seed %d step %d: front/back %d/%d want %d/%d", seed, step, l.Front(), l.Back(), front, back)
			}
		}
	}
}

// TestSetModel is a property test: a Set behaves as a naive LRU (a slice
// kept most recent first, cut at the capacity) under random touches and
// lookups, and reports what it evicts.
func TestSetModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		capacity := 1 + rng.IntN(40)
		s := NewSet[uint64](capacity)
		var model []uint64
		keys := 1 + rng.IntN(3*capacity)
		for step := range 5000 {
			k := uint64(rng.IntN(keys))
			switch {
			case rng.IntN(3) == 0:
				if got, want := s.Contains(k), slices.Contains(model, k); got != want {
					t.Fatalf("seed %d step %d: Contains(%d)=%v want %v", seed, step, k, got, want)
				}
			case rng.IntN(500) == 0:
				s.Clear()
				model = model[:0]
			default:
				ev, ok := s.Touch(k)
				var wantEv uint64
				wantOK := false
				if i := slices.Index(model, k); i >= 0 {
					model = slices.Delete(model, i, i+1)
				} else if len(model) == capacity {
					wantEv, wantOK = model[len(model)-1], true
					model = model[:len(model)-1]
				}
				model = slices.Insert(model, 0, k)
				if ev != wantEv || ok != wantOK {
					t.Fatalf("seed %d step %d: Touch(%d) evicted %d,%v want %d,%v", seed, step, k, ev, ok, wantEv, wantOK)
				}
			}
			if s.Len() != len(model) {
				t.Fatalf("seed %d step %d: Len=%d want %d", seed, step, s.Len(), len(model))
			}
			old, ok := s.Oldest()
			if ok != (len(model) > 0) || (ok && old != model[len(model)-1]) {
				t.Fatalf("seed %d step %d: Oldest=%d,%v want the model's last of %v", seed, step, old, ok, model)
			}
		}
		for _, k := range model {
			if !s.Contains(k) {
				t.Fatalf("seed %d: %d missing at the end", seed, k)
			}
		}
	}
}

func FuzzList(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, ops []byte) {
		// Property: no sequence of valid operations breaks the links or
		// the length.
		l := NewList(8)
		in := map[int32]bool{}
		for _, op := range ops {
			s := int32(op % 8)
			switch {
			case !in[s] && op&0x80 != 0:
				l.PushFront(s)
				in[s] = true
			case !in[s]:
				l.PushBack(s)
				in[s] = true
			case op&0x40 != 0:
				l.MoveToFront(s)
			default:
				l.Remove(s)
				delete(in, s)
			}
			if got := walk(t, l); len(got) != len(in) || l.Len() != len(in) {
				t.Fatalf("list %v, len %d, want %d members", got, l.Len(), len(in))
			}
		}
	})
}
