package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a goroutine-safe bytes.Buffer for the output of something
// running in the background of a test (a command, a server's log).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
