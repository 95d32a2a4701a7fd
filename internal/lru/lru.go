package lru

// None is the slot Front, Back, Next and Prev return when there is none.
const None int32 = -1

// detached marks a slot that is not in the list (in prev; next is None).
const detached int32 = -2

// List is a doubly linked list of slots 0..Slots()-1, each in the list at
// most once. The front is the end PushFront adds to; what "recent" means is
// the caller's: the prefix index keeps the most recently used block at the
// front and evicts from the back, the KV cache's free queue evicts from the
// front (the least recently freed block) and frees to the back.
//
// The zero List is not ready for use: make one with NewList. A List may be
// copied by value before use (to embed it without an indirection).
type List struct {
	prev, next []int32
	head, tail int32
	n          int
}

// NewList returns a list with slots detached slots (none in the list).
func NewList(slots int) *List {
	l := &List{head: None, tail: None, prev: make([]int32, 0, slots), next: make([]int32, 0, slots)}
	l.Grow(slots)
	return l
}

// Grow adds detached slots up to slots in all (no-op when already that many).
func (l *List) Grow(slots int) {
	for len(l.prev) < slots {
		l.prev = append(l.prev, detached)
		l.next = append(l.next, None)
	}
}

// AddSlot adds one detached slot and returns it.
func (l *List) AddSlot() int32 {
	s := int32(len(l.prev))
	l.prev = append(l.prev, detached)
	l.next = append(l.next, None)
	return s
}

// Slots is the number of slots, in the list or not.
func (l *List) Slots() int { return len(l.prev) }

// Len is the number of slots in the list.
func (l *List) Len() int { return l.n }

// Contains reports whether slot s is in the list.
func (l *List) Contains(s int32) bool { return l.prev[s] != detached }

// Front is the front slot (None when empty).
func (l *List) Front() int32 { return l.head }

// Back is the back slot (None when empty).
func (l *List) Back() int32 { return l.tail }

// Next is the slot after s, towards the back (None at the back). s must
// be in the list.
func (l *List) Next(s int32) int32 { return l.next[s] }

// Prev is the slot before s, towards the front (None at the front). s
// must be in the list.
func (l *List) Prev(s int32) int32 { return l.prev[s] }

// PushFront puts detached slot s at the front.
func (l *List) PushFront(s int32) {
	l.prev[s], l.next[s] = None, l.head
	if l.head >= 0 {
		l.prev[l.head] = s
	} else {
		l.tail = s
	}
	l.head = s
	l.n++
}

// PushBack puts detached slot s at the back.
func (l *List) PushBack(s int32) {
	l.prev[s], l.next[s] = l.tail, None
	if l.tail >= 0 {
		l.next[l.tail] = s
	} else {
		l.head = s
	}
	l.tail = s
	l.n++
}

// Remove takes slot s, which must be in the list, out of it.
func (l *List) Remove(s int32) {
	p, n := l.prev[s], l.next[s]
	if p >= 0 {
		l.next[p] = n
	} else {
		l.head = n
	}
	if n >= 0 {
		l.prev[n] = p
	} else {
		l.tail = p
	}
	l.prev[s], l.next[s] = detached, None
	l.n--
}

// MoveToFront moves slot s, which must be in the list, to the front.
func (l *List) MoveToFront(s int32) {
	if l.head == s {
		return
	}
	// s is not the front, so it has a predecessor.
	p, n := l.prev[s], l.next[s]
	l.next[p] = n
	if n >= 0 {
		l.prev[n] = p
	} else {
		l.tail = p
	}
	l.prev[s], l.next[s] = None, l.head
	l.prev[l.head] = s
	l.head = s
}

// Reset removes every slot, keeping their storage for reuse (Slots is 0
// afterwards).
func (l *List) Reset() {
	l.prev, l.next = l.prev[:0], l.next[:0]
	l.head, l.tail, l.n = None, None, 0
}
