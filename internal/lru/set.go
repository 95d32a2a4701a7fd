package lru

// Set is a bounded set of keys that evicts the least recently touched key
// when a new one would exceed its capacity. Storage grows with use up to
// the capacity and is then recycled: a key's slot is taken over by the key
// that evicts it, so a full Set allocates nothing.
type Set[K comparable] struct {
	capacity int
	slot     map[K]int32
	keys     []K
	order    List // front: most recently touched
}

// NewSet returns a set holding at most capacity keys (at least 1).
func NewSet[K comparable](capacity int) *Set[K] {
	capacity = max(capacity, 1)
	return &Set[K]{capacity: capacity, slot: make(map[K]int32, capacity), order: *NewList(0)}
}

// Cap is the capacity.
func (s *Set[K]) Cap() int { return s.capacity }

// Len is the number of keys held.
func (s *Set[K]) Len() int { return len(s.slot) }

// Contains reports whether k is held. It does not touch recency: looking
// is not using.
func (s *Set[K]) Contains(k K) bool {
	_, ok := s.slot[k]
	return ok
}

// Touch makes k the most recently used key, adding it if absent and then
// evicting the least recently used key when over capacity. It returns the
// evicted key, if any.
func (s *Set[K]) Touch(k K) (evicted K, ok bool) {
	if i, hit := s.slot[k]; hit {
		s.order.MoveToFront(i)
		return evicted, false
	}
	var i int32
	if len(s.keys) < s.capacity {
		i = s.order.AddSlot()
		s.keys = append(s.keys, k)
	} else {
		i = s.order.Back()
		s.order.Remove(i)
		evicted, ok = s.keys[i], true
		delete(s.slot, evicted)
		s.keys[i] = k
	}
	s.slot[k] = i
	s.order.PushFront(i)
	return evicted, ok
}

// Oldest is the least recently touched key (false when empty).
func (s *Set[K]) Oldest() (k K, ok bool) {
	if i := s.order.Back(); i != None {
		return s.keys[i], true
	}
	return k, false
}

// Clear forgets every key, keeping the storage.
func (s *Set[K]) Clear() {
	clear(s.slot)
	s.keys = s.keys[:0]
	s.order.Reset()
}
