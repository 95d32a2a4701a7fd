// Package lru is the recency list shared by the gateway's prefix index
// (internal/gateway/sched) and the simulator's paged KV cache
// (internal/sim): an index-based, intrusive doubly linked list over integer
// slots, and a bounded LRU set of keys built on it.
//
// Slots are int32 indices into the caller's own parallel arrays (a KV
// block's refcount and hash, a prefix index's key), so the list allocates
// nothing per element and moving an element costs a few array writes. It is
// a leaf package (standard library only) and not safe for concurrent use:
// callers hold their own lock.
package lru
